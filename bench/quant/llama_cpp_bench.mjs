// llama.cpp's CPU backend, as the npm package node-llama-cpp bundles it prebuilt, on one GGUF
// file: prefill speed and greedy decode speed for the given prompt token ids, printed as one JSON
// line per prompt length. bench/quant/side_by_side.py runs it beside `deltaserve generate` on
// the same file, ids and thread count. Not part of the test suite.
//
//   node bench/quant/llama_cpp_bench.mjs --model F.gguf --prompt-lens 512,2048 --decode 256 --threads 2 --vocab 8192
import { fileURLToPath, pathToFileURL } from "node:url";
import path from "node:path";

// scripts/setup --with-llama-cpp installs the package in bench/node, away from the product's
// own node_modules; an ES module finds it only by path.
const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.join(here, "..", "node", "node_modules", "node-llama-cpp", "dist", "index.js");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(pkg).href);

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}
const modelPath = arg("model");
const promptLens = arg("prompt-lens", "512").split(",").map(Number);
const decode = Number(arg("decode", "256"));
const threads = Number(arg("threads", "2"));
const repeats = Number(arg("repeats", "1"));
if (!modelPath) {
  console.error("usage: llama_cpp_bench.mjs --model F.gguf [--prompt-lens 512,2048] [--decode 256] [--threads 2] [--repeats 1]");
  process.exit(2);
}

// The prompt ids side_by_side.py gives deltaserve too: a fixed walk over the vocabulary
// (speed does not depend on which ids, except through MoE routing, which then matches).
function promptIds(n, vocab) {
  const ids = [];
  for (let i = 0; i < n; ++i) ids.push(100 + ((i * 7919) % (vocab - 200)));
  return ids;
}

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: threads });
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const nVocab = Number(arg("vocab", "8192"));

for (const n of promptLens) {
  let best = null;
  for (let r = 0; r < repeats; ++r) {
    const context = await model.createContext({
      contextSize: n + decode + 64,
      batchSize: n,
      sequences: 1,
      threads: { ideal: threads, min: threads },
    });
    const seq = context.getSequence();
    const ids = promptIds(n, nVocab);
    const t0 = performance.now();
    let first = 0, count = 0;
    const tokens = [];
    // Greedy: temperature 0 takes the argmax. The first token ends the prefill; the rest decode.
    for await (const tok of seq.evaluate(ids, { temperature: 0 })) {
      if (tokens.length < 32) tokens.push(Number(tok));
      if (count === 0) first = performance.now();
      if (++count >= decode + 1) break;
    }
    const t1 = performance.now();
    const res = {
      engine: "llama.cpp",
      model: modelPath,
      prompt_tokens: n,
      decode_tokens: count - 1,
      prefill_tokens_per_s: n / ((first - t0) / 1000),
      decode_tokens_per_s: (count - 1) / ((t1 - first) / 1000),
      threads,
      first_tokens: tokens,
    };
    await context.dispose();
    if (!best || res.decode_tokens_per_s > best.decode_tokens_per_s) best = { ...res, prefill_tokens_per_s: Math.max(res.prefill_tokens_per_s, best?.prefill_tokens_per_s ?? 0) };
  }
  console.log(JSON.stringify(best));
}
await model.dispose();
await llama.dispose();
