#!/usr/bin/env python3
"""Writes the pathological GGUF files of issue 40 into fuzz/corpus/gguf_header/, each the
committed seed (micro_llama_q8_0.gguf, from make_gguf_seed.py) with one count or size rewritten:
block_count 10^8 once made the loader allocate 2.4 GB before failing, and 2^31 - 1 ended in
bad_alloc. Every file must now be refused with one error naming the field and its range, in
small memory. Run once; the output is committed."""
import pathlib
import struct

corpus = pathlib.Path(__file__).resolve().parent / 'corpus' / 'gguf_header'
seed = (corpus / 'micro_llama_q8_0.gguf').read_bytes()


def with_value(key, fmt, value):
    """The seed with the value of metadata `key` (after its u32 type) replaced."""
    at = seed.index(key.encode()) + len(key) + 4
    b = bytearray(seed)
    b[at:at + struct.calcsize(fmt)] = struct.pack(fmt, value)
    return bytes(b)


def with_header(offset, fmt, value):
    b = bytearray(seed)
    b[offset:offset + struct.calcsize(fmt)] = struct.pack(fmt, value)
    return bytes(b)


def with_array_length(key, n):
    at = seed.index(key.encode()) + len(key) + 4 + 4  # value type, element type
    b = bytearray(seed)
    b[at:at + 8] = struct.pack('<Q', n)
    return bytes(b)


files = {
    'block_count_1e8.gguf': with_value('llama.block_count', '<I', 10**8),
    'block_count_2e31.gguf': with_value('llama.block_count', '<I', 2**31 - 1),
    'block_count_u32max.gguf': with_value('llama.block_count', '<I', 2**32 - 1),
    'block_count_past_tensors.gguf': with_value('llama.block_count', '<I', 1000),
    'embedding_length_2e31.gguf': with_value('llama.embedding_length', '<I', 2**31 - 1),
    'feed_forward_length_1e8.gguf': with_value('llama.feed_forward_length', '<I', 10**8),
    'head_count_1e8.gguf': with_value('llama.attention.head_count', '<I', 10**8),
    'context_length_2e31.gguf': with_value('llama.context_length', '<I', 2**31 - 1),
    'eos_token_id_2e31.gguf': with_value('tokenizer.ggml.eos_token_id', '<I', 2**31 - 1),
    'tensor_count_2e31.gguf': with_header(8, '<Q', 2**31),
    'metadata_count_2e20.gguf': with_header(16, '<Q', 2**20),
    'tokens_array_2e25.gguf': with_array_length('tokenizer.ggml.tokens', 2**25),
    'merges_array_u64max.gguf': with_array_length('tokenizer.ggml.merges', 2**64 - 1),
}
for name, b in files.items():
    (corpus / name).write_bytes(b)
    print(corpus / name, len(b), 'bytes')
