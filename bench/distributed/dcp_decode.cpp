// Decode step time at a long context, one process against decode context parallel ranks.
// Run as one process (`dcp_decode MODEL`) and under mpirun (`mpirun -np 2 dcp_decode MODEL
// --dcp 2 [--tp T]`); bench/distributed/dcp_decode.sh runs the comparison. The KV of `--context`
// tokens is written through load_block (what a resumed prefix would load) instead of a
// prefill, so the figure is the decode step alone: every rank then attends its 1/dcp of the
// context and the ranks merge.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/log.h"
#include "distributed/ranked_model.h"
#include "distributed/ranks.h"
#include "model/model.h"

using namespace ds;

int main(int argc, char** argv) {
  log_to_stderr();  // the result line goes to stdout, the ranks' log lines not with it
  distributed::Ranks ranks;
  if (ranks.rank() != 0) return ranks.serve_as_worker();
  if (argc < 2) {
    std::fprintf(stderr, "usage: dcp_decode MODEL [--dcp D] [--tp T] [--threads N] [--context N] [--rows R] [--steps S]\n");
    return 2;
  }
  std::string dir = argv[1];
  int dcp = 1, tp = 1, threads = 1, context = 32768, rows = 1, steps = 20;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--dcp") dcp = v;
    else if (k == "--tp") tp = v;
    else if (k == "--threads") threads = v;
    else if (k == "--context") context = v;
    else if (k == "--rows") rows = v;
    else if (k == "--steps") steps = v;
  }
  std::unique_ptr<Model> m;
  if (ranks.distributed())
    m = std::make_unique<distributed::RankedModel>(ranks.collectives(), distributed::OpenRequest{dir, tp, dcp, threads, "auto"}, 600);
  else
    m = Model::load(dir, threads);
  const int bs = 64, per_seq = (context + steps + bs) / bs + 1;
  m->set_kv_dtype(KvDtype::BF16);
  m->set_activation_dtype(ActivationDtype::BF16);
  RuntimeLimits l;
  l.max_seqs = rows;
  l.max_batch_tokens = rows;
  l.max_logit_rows = rows;
  l.num_kv_blocks = per_seq * rows;
  l.block_size = bs;
  l.threads = threads;
  m->allocate(l);
  // Every block of every sequence written (small bf16 values), so the step streams real memory.
  std::vector<std::byte> block(m->kv_bytes_per_block(bs));
  for (size_t i = 0; i + 1 < block.size(); i += 2) {
    block[i] = std::byte{0x00};
    block[i + 1] = std::byte{0x3c};
  }
  for (int b = 0; b < l.num_kv_blocks; ++b) m->load_block(b, block.data());
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < per_seq; ++b) tables[size_t(r)].push_back(r * per_seq + b);
  std::vector<float> logits(size_t(rows) * size_t(m->config().vocab_size));
  std::vector<double> times;
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> tokens(size_t(rows), 17);
    std::vector<SeqChunk> seqs;
    for (int r = 0; r < rows; ++r) seqs.push_back(SeqChunk{r, tables[size_t(r)].data(), context + s, 1, r, 1});
    const auto t0 = std::chrono::steady_clock::now();
    m->forward(ForwardBatch{tokens, seqs}, logits.data());
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // The first steps warm the pages and caches: the median of the rest.
  std::vector<double> rest(times.begin() + std::min<long>(3, long(times.size()) - 1), times.end());
  std::sort(rest.begin(), rest.end());
  const double med = rest[rest.size() / 2];
  const ForwardProfile& p = m->last_profile();
  std::printf("dcp_decode: ranks %d (tp %d, dcp %d) x %d threads, context %d, rows %d: step %.2f ms median "
              "(kv_attention %.2f ms, rank_comm %.2f ms on rank 0 in the last step)\n",
              ranks.size(), tp, dcp, threads, context, rows, med * 1e3, p.seconds[ForwardProfile::KvAttention] * 1e3,
              p.seconds[ForwardProfile::RankComm] * 1e3);
  return 0;
}
