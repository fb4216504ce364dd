#!/usr/bin/env python3
"""Writes fuzz/corpus/gguf_header/micro_llama_q8_0.gguf: a whole llama model in under 50 KB
(1 layer, hidden 32, 259 tokens, Q8_0 linears), so the GGUF fuzzer starts from a file that gets
through the reader, the config, the tokenizer and the weight translation. Run once; the output
is committed."""
import pathlib
import struct

import numpy as np

def s(x):
    b = x.encode()
    return struct.pack('<Q', len(b)) + b

def kv(key, type_id, payload):
    return s(key) + struct.pack('<I', type_id) + payload

u32 = lambda k, v: kv(k, 4, struct.pack('<I', v))
f32v = lambda k, v: kv(k, 6, struct.pack('<f', v))
string = lambda k, v: kv(k, 8, s(v))
strings = lambda k, vs: kv(k, 9, struct.pack('<IQ', 8, len(vs)) + b''.join(s(v) for v in vs))
i32s = lambda k, vs: kv(k, 9, struct.pack('<IQ', 5, len(vs)) + b''.join(struct.pack('<i', v) for v in vs))

def byte_level_alphabet():
    # GPT-2's printable stand-ins for the 256 bytes, in byte order.
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]

TOKENS = byte_level_alphabet() + ['ab', 'cd', '<|endoftext|>']
TYPES = [1] * 258 + [3]
H, FF, V, NH, NKV = 32, 32, len(TOKENS), 2, 1
hd = H // NH
kvs = [string('general.architecture', 'llama'), u32('llama.block_count', 1), u32('llama.embedding_length', H),
       u32('llama.feed_forward_length', FF), u32('llama.attention.head_count', NH), u32('llama.attention.head_count_kv', NKV),
       f32v('llama.attention.layer_norm_rms_epsilon', 1e-5), u32('llama.context_length', 64),
       string('tokenizer.ggml.model', 'gpt2'), string('tokenizer.ggml.pre', 'gpt-2'),
       strings('tokenizer.ggml.tokens', TOKENS),
       i32s('tokenizer.ggml.token_type', TYPES), strings('tokenizer.ggml.merges', ['a b', 'c d']),
       u32('tokenizer.ggml.eos_token_id', V - 1)]
rng = np.random.default_rng(1)
f32 = lambda n: rng.standard_normal(n).astype('<f4').tobytes()

def q8(rows, k):
    return b''.join(np.float16(0.01).tobytes() + rng.integers(-127, 128, 32).astype('i1').tobytes() for _ in range(rows * k // 32))

tensors = [('token_embd.weight', 0, [H, V], f32(H * V)), ('output_norm.weight', 0, [H], f32(H)),
           ('blk.0.attn_norm.weight', 0, [H], f32(H)), ('blk.0.ffn_norm.weight', 0, [H], f32(H)),
           ('blk.0.attn_q.weight', 8, [H, H], q8(H, H)), ('blk.0.attn_k.weight', 8, [H, NKV * hd], q8(NKV * hd, H)),
           ('blk.0.attn_v.weight', 8, [H, NKV * hd], q8(NKV * hd, H)), ('blk.0.attn_output.weight', 8, [H, H], q8(H, H)),
           ('blk.0.ffn_gate.weight', 8, [H, FF], q8(FF, H)), ('blk.0.ffn_up.weight', 8, [H, FF], q8(FF, H)),
           ('blk.0.ffn_down.weight', 8, [FF, H], q8(H, FF))]
head = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs)) + b''.join(kvs)
off, infos, data = 0, b'', b''
for name, t, dims, b in tensors:
    infos += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims) + struct.pack('<IQ', t, off)
    pad = (-len(b)) % 32
    data += b + b'\0' * pad
    off += len(b) + pad
h = head + infos
h += b'\0' * ((-len(h)) % 32)
out = pathlib.Path(__file__).resolve().parent / 'corpus' / 'gguf_header' / 'micro_llama_q8_0.gguf'
out.write_bytes(h + data)
print(out, len(h + data), 'bytes')
