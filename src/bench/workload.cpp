#include "bench/workload.h"

#include <cmath>
#include <unordered_map>

#include "core/error.h"

namespace ds::bench {

namespace {

int64_t scaled(int64_t v, double f) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(v) * f));
}

void scale_session(Session& s, double f) {
  for (auto& r : s.requests) {
    r.input_tokens = scaled(r.input_tokens, f);
    r.output_tokens = scaled(r.output_tokens, f);
  }
  for (auto& sp : s.spawns) scale_session(sp.child, f);
}

void collect_ids(const Session& s, std::unordered_set<uint64_t>& ids) {
  for (auto& r : s.requests) ids.insert(r.hash_ids.begin(), r.hash_ids.end());
  for (auto& sp : s.spawns) collect_ids(sp.child, ids);
}

}  // namespace

void scale_workload(Workload& w, double factor) {
  DS_CHECK(factor > 0 && std::isfinite(factor), "--scale must be a positive number");
  if (factor == 1.0) return;
  w.block_size = scaled(w.block_size, factor);
  for (auto& s : w.sessions) scale_session(s, factor);
}

std::unordered_set<uint64_t> shared_hash_ids(const Workload& w) {
  std::unordered_map<uint64_t, int> trees;
  for (auto& s : w.sessions) {
    std::unordered_set<uint64_t> ids;
    collect_ids(s, ids);
    for (auto id : ids) ++trees[id];
  }
  std::unordered_set<uint64_t> shared;
  for (auto& [id, n] : trees)
    if (n > 1) shared.insert(id);
  return shared;
}

size_t count_requests(const Session& s) {
  size_t n = s.requests.size();
  for (auto& sp : s.spawns) n += count_requests(sp.child);
  return n;
}

size_t count_requests(const Workload& w) {
  size_t n = 0;
  for (auto& s : w.sessions) n += count_requests(s);
  return n;
}

}  // namespace ds::bench
