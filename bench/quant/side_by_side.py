#!/usr/bin/env python3
"""DeltaServe beside llama.cpp on the very same GGUF files, per weight format.

For each preset (bench-100m-dense, the llama shape, and bench-100m, the kimi-linear hybrid) the
script makes the bf16 checkpoint, quantizes it to q8_0, q4_0 and mxfp4 (`deltaserve quantize`),
writes each as one GGUF file (`deltaserve export-gguf`), and runs on that file, with the same
prompt token ids and the same thread count:
  - `deltaserve generate --model F.gguf` (prefill and greedy decode speed, --json), and
  - llama.cpp's CPU backend as the npm package node-llama-cpp bundles it prebuilt
    (bench/quant/llama_cpp_bench.mjs; installed by `scripts/setup --with-llama-cpp`).
It measures `deltaserve bandwidth` before and after, and prints decode tok/s, the bytes a decode
step reads per second (the weights, plus the KV cache at the mean context of the decode) over
that bandwidth, prefill tok/s, the ratios to llama.cpp, and whether the two engines' first
greedy tokens agree (a check that both read the file the same way). Each thread count runs both
engines; on this 2-vCPU machine llama.cpp's 2-thread decode loses to its 1-thread one (its
workers spin against node's thread), so the summary sets deltaserve at each thread count
against llama.cpp's best. Then decode at 8k context with the KV cache in f32, bf16 and fp8
(deltaserve only).

  python3 bench/quant/side_by_side.py [--presets bench-100m-dense,bench-100m] [--formats bf16,q8_0,q4_0,mxfp4]
      [--prompt-lens 16,512,2048] [--decode 256] [--threads 1,2] [--repeats 2] [--out out/quant] [--no-kv8k]

Not part of the test suite: it prints figures, it asserts nothing. Run it on a quiet machine.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DS = os.path.join(ROOT, "build", "deltaserve")
LLAMA = os.path.join(ROOT, "bench", "quant", "llama_cpp_bench.mjs")
AGREE_TOKENS = 16


def run(cmd):
    return subprocess.run(cmd, check=True, text=True, capture_output=True).stdout


def prompt_ids(n, vocab):
    # The same walk llama_cpp_bench.mjs takes.
    return [100 + (i * 7919) % (vocab - 200) for i in range(n)]


def bandwidth(threads):
    return json.loads(run([DS, "bandwidth", "--threads", str(threads)]).strip().splitlines()[-1])["read_gb_per_s"]


def deltaserve(model, n, decode, threads, vocab, repeats, kv="f32"):
    ids = ",".join(map(str, prompt_ids(n, vocab)))
    best = None
    for _ in range(repeats):
        out = run([DS, "generate", "--model", model, "--prompt-ids", ids, "--max-tokens", str(decode + 1), "--ignore-eos",
                   "--json", "--threads", str(threads), "--kv-cache-dtype", kv])
        j = json.loads(out)
        if best is None:
            best = j
        else:
            best["decode_tokens_per_s"] = max(best["decode_tokens_per_s"], j["decode_tokens_per_s"])
            best["prefill_tokens_per_s"] = max(best["prefill_tokens_per_s"], j["prefill_tokens_per_s"])
    return best


def llama_cpp(model, lens, decode, threads, vocab, repeats):
    out = run(["node", LLAMA, "--model", model, "--prompt-lens", ",".join(map(str, lens)), "--decode", str(decode),
               "--threads", str(threads), "--vocab", str(vocab), "--repeats", str(repeats)])
    return {j["prompt_tokens"]: j for j in map(json.loads, out.strip().splitlines())}


def stage(preset, fmt, out):
    """The preset at fmt as a checkpoint folder and as one GGUF file; made once."""
    base = os.path.join(out, "models", f"{preset}-bf16")
    if not os.path.exists(os.path.join(base, "config.json")):
        run([DS, "make-model", "--preset", preset, "--seed", "1", "--dtype", "bf16", "--out", base])
    folder = base
    if fmt != "bf16":
        folder = os.path.join(out, "models", f"{preset}-{fmt}")
        if not os.path.exists(os.path.join(folder, "config.json")):
            run([DS, "quantize", "--model", base, "--format", fmt, "--out", folder])
    gguf = os.path.join(out, "gguf", f"{preset}-{fmt}.gguf")
    if not os.path.exists(gguf):
        os.makedirs(os.path.dirname(gguf), exist_ok=True)
        run([DS, "export-gguf", "--model", folder, "--out", gguf])
    with open(os.path.join(base, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    return gguf, vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="bench-100m-dense,bench-100m")
    ap.add_argument("--formats", default="bf16,q8_0,q4_0,mxfp4")
    ap.add_argument("--prompt-lens", default="16,512,2048")
    ap.add_argument("--decode", type=int, default=256)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "quant"))
    ap.add_argument("--no-kv8k", action="store_true", help="skip decode at 8k context with f32 / bf16 / fp8 KV")
    ap.add_argument("--no-setup", action="store_true", help="skip scripts/setup --with-llama-cpp and scripts/build")
    a = ap.parse_args()
    if not a.no_setup:
        subprocess.run([os.path.join(ROOT, "scripts", "setup"), "--with-llama-cpp"], check=True)
        subprocess.run([os.path.join(ROOT, "scripts", "build")], check=True, stdout=subprocess.DEVNULL)
    lens = [int(x) for x in a.prompt_lens.split(",")]
    thread_counts = [int(x) for x in a.threads.split(",")]
    load = os.getloadavg()[0]
    print(f"load average before: {load:.2f} (measure on a quiet machine)", file=sys.stderr)
    bw0 = bandwidth(max(thread_counts))
    rows = []
    for preset in a.presets.split(","):
        for fmt in a.formats.split(","):
            gguf, vocab = stage(preset, fmt, a.out)
            print(f"{preset} {fmt}: {os.path.getsize(gguf) / 2**20:.1f} MiB", file=sys.stderr)
            for threads in thread_counts:
                try:
                    lc = llama_cpp(gguf, lens, a.decode, threads, vocab, a.repeats)
                    lc_error = None
                except subprocess.CalledProcessError as e:
                    lc, lc_error = {}, (e.stderr or e.stdout or "").strip().splitlines()[-1:] or ["failed"]
                for n in lens:
                    ds = deltaserve(gguf, n, a.decode, threads, vocab, a.repeats)
                    l = lc.get(n)
                    agree = None
                    if l:
                        pairs = list(zip(ds["tokens"][:AGREE_TOKENS], l["first_tokens"][:AGREE_TOKENS]))
                        agree = next((i for i, (x, y) in enumerate(pairs) if x != y), len(pairs))
                    # A decode step reads the weights and the KV of its context (mean over the decode).
                    step_bytes = ds["decode_weight_bytes"] + ds["kv_bytes_per_token"] * (n + a.decode / 2)
                    rows.append({"preset": preset, "format": fmt, "threads": threads, "prompt_tokens": n,
                                 "gguf_bytes": os.path.getsize(gguf), "decode_weight_bytes": ds["decode_weight_bytes"],
                                 "decode_step_bytes": step_bytes,
                                 "deltaserve": {k: ds[k] for k in ("decode_tokens_per_s", "prefill_tokens_per_s")},
                                 "llama_cpp": None if not l else {k: l[k] for k in ("decode_tokens_per_s", "prefill_tokens_per_s")},
                                 "llama_cpp_error": lc_error, "first_tokens_agree": agree})
    kv_rows = []
    if not a.no_kv8k:
        preset = a.presets.split(",")[0]
        gguf, vocab = stage(preset, "bf16", a.out)
        for kv in ("f32", "bf16", "fp8"):
            ds = deltaserve(gguf, 8192 - a.decode - 1, a.decode, max(thread_counts), vocab, a.repeats, kv)
            kv_rows.append({"preset": preset, "kv_cache_dtype": kv, "context": 8192, "decode_tokens_per_s": ds["decode_tokens_per_s"],
                            "kv_bytes_per_token": ds["kv_bytes_per_token"]})
    bw1 = bandwidth(max(thread_counts))
    bw = (bw0 + bw1) / 2

    print(f"\nbandwidth (deltaserve bandwidth, {max(thread_counts)} threads): {bw0:.1f} GB/s before, {bw1:.1f} after; ratios use {bw:.1f}")
    print(f"decode {a.decode} tokens after the prompt, greedy; best of {a.repeats}; "
          "GB/s = (weights + KV at the decode's mean context) x tok/s\n")
    hdr = ("preset", "format", "threads", "prompt", "DS dec tok/s", "DS GB/s", "of bw", "llama dec", "DS/llama", "DS prefill",
           "llama prefill", "DS/llama", "agree")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for r in rows:
        d, l = r["deltaserve"], r["llama_cpp"]
        gbs = r["decode_step_bytes"] * d["decode_tokens_per_s"] / 1e9
        cells = [r["preset"], r["format"], str(r["threads"]), str(r["prompt_tokens"]), f"{d['decode_tokens_per_s']:.1f}",
                 f"{gbs:.1f}", f"{gbs / bw:.2f}"]
        if l:
            cells += [f"{l['decode_tokens_per_s']:.1f}", f"{d['decode_tokens_per_s'] / l['decode_tokens_per_s']:.2f}x",
                      f"{d['prefill_tokens_per_s']:.0f}", f"{l['prefill_tokens_per_s']:.0f}",
                      f"{d['prefill_tokens_per_s'] / l['prefill_tokens_per_s']:.2f}x", f"{r['first_tokens_agree']}/{AGREE_TOKENS}"]
        else:
            cells += ["-", "-", f"{d['prefill_tokens_per_s']:.0f}", "-", "-", "llama.cpp: " + " ".join(r["llama_cpp_error"] or [])]
        print("| " + " | ".join(cells) + " |")
    # deltaserve at the most threads against llama.cpp at its best thread count, per point.
    top = max(thread_counts)
    print(f"\ndeltaserve at {top} threads against llama.cpp at its best thread count:")
    print("| preset | format | prompt | decode DS/llama | prefill DS/llama |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r["threads"] != top:
            continue
        same = [x for x in rows if (x["preset"], x["format"], x["prompt_tokens"]) == (r["preset"], r["format"], r["prompt_tokens"])
                and x["llama_cpp"]]
        if not same:
            continue
        ld = max(x["llama_cpp"]["decode_tokens_per_s"] for x in same)
        lp = max(x["llama_cpp"]["prefill_tokens_per_s"] for x in same)
        print(f"| {r['preset']} | {r['format']} | {r['prompt_tokens']} | {r['deltaserve']['decode_tokens_per_s'] / ld:.2f}x | "
              f"{r['deltaserve']['prefill_tokens_per_s'] / lp:.2f}x |")
    if kv_rows:
        base = kv_rows[0]["decode_tokens_per_s"]
        print(f"\ndecode at 8k context ({kv_rows[0]['preset']} bf16 weights, {top} threads), deltaserve, by KV cache dtype:")
        for k in kv_rows:
            print(f"  {k['kv_cache_dtype']:>4}: {k['decode_tokens_per_s']:.1f} tok/s ({k['decode_tokens_per_s'] / base:.2f}x f32), "
                  f"{k['kv_bytes_per_token']} KV bytes per token")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "side_by_side.json"), "w") as f:
        json.dump({"bandwidth_gb_per_s": [bw0, bw1], "threads": thread_counts, "rows": rows, "kv8k": kv_rows,
                   "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_before": load}, f, indent=1)


if __name__ == "__main__":
    main()
