// Shared helpers for model tests: generate preset models once per test binary through the CLI
// (the same path users take), and run single sequences or batches through Model::forward.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "../support/remove_at_exit.h"

namespace ds::test {

// Writes `deltaserve make-model --preset P --seed S --dtype D` into a temp dir once per process.
inline std::string preset_dir(const std::string& preset, int seed, const std::string& dtype) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("ds-test-" + std::to_string(::getpid()) + "-" + preset + "-" + std::to_string(seed) + "-" + dtype))
                              .string();
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    remove_at_exit(dir);
    const std::string cmd = std::string(DS_CLI) + " make-model --preset " + preset + " --seed " + std::to_string(seed) +
                            " --dtype " + dtype + " --out " + dir + " 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  }
  return dir;
}

struct Runner {
  std::unique_ptr<Model> model;
  std::vector<std::vector<int32_t>> tables;  // per slot
  int vocab = 0;

  Runner(const std::string& dir, int max_seqs = 4, int max_tokens = 512, int threads = 2, int blocks_per_seq = 8,
         KvDtype kv = KvDtype::F32) {
    model = Model::load(dir, threads);
    model->set_kv_dtype(kv);
    RuntimeLimits lim;
    lim.max_seqs = max_seqs;
    lim.max_batch_tokens = max_tokens;
    lim.max_logit_rows = max_tokens;
    lim.num_kv_blocks = max_seqs * blocks_per_seq;
    lim.block_size = 64;
    model->allocate(lim);
    vocab = model->config().vocab_size;
    // Interleaved block ids so sequences never get contiguous pools by accident.
    for (int s = 0; s < max_seqs; ++s) {
      std::vector<int32_t> t;
      for (int b = 0; b < blocks_per_seq; ++b) t.push_back(b * max_seqs + (max_seqs - 1 - s));
      tables.push_back(t);
    }
  }

  // Runs tokens [start, start + n) of one sequence; returns all their logits rows.
  std::vector<float> run(int slot, const std::vector<int32_t>& toks, int start, bool all_logits = true) {
    SeqChunk sc;
    sc.slot = slot;
    sc.block_table = tables[size_t(slot)].data();
    sc.start_pos = start;
    sc.num_tokens = int(toks.size());
    sc.token_offset = 0;
    sc.num_logits = all_logits ? sc.num_tokens : 1;
    std::vector<float> logits(size_t(sc.num_logits) * size_t(vocab));
    ForwardBatch b{toks, std::span<const SeqChunk>(&sc, 1)};
    model->forward(b, logits.data());
    return logits;
  }
};

// rms(a - b) / rms(b): how far a run's logits moved from a reference run's.
inline double relative_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

inline int argmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

}  // namespace ds::test
