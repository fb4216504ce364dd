#include "cache/prefix_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <filesystem>

#include "cache/block_hash.h"

namespace ds {

PrefixCache::PrefixCache(const PrefixCacheConfig& cfg, CacheMemory& memory)
    : cfg_(cfg), memory_(memory), pool_(cfg.num_blocks, cfg.block_size) {
  if (!cfg_.enabled) return;
  key_ = ChainKey::random();
  snapshots_ = std::make_unique<StateSnapshots>(cfg_.num_snapshots, memory_.state_bytes_per_slot());
  if (cfg_.disk_dir.empty()) return;
  // Entries live in a subfolder named by the chain seed (the weights' fingerprint, KV layout,
  // block size): another model's or another layout's entries, in their own subfolders, are
  // never looked at, only counted, and left for their own server.
  ensure_private_dir(cfg_.disk_dir);
  char ns[24];
  std::snprintf(ns, sizeof ns, "%016llx", static_cast<unsigned long long>(cfg_.seed));
  disk_ = std::make_unique<DiskTier>(cfg_.disk_dir + "/" + ns, cfg_.disk_bytes);
  // The entries' names are hashes under this key: a restart must hash with the same one.
  key_ = ChainKey::load_or_create(cfg_.disk_dir + "/" + ns + "/chain.key");
  foreign_entries_ = count_foreign_entries(cfg_.disk_dir, ns);
  spdlog::info("disk tier: {}/{} ({} entries, {:.3f} GiB of {:.3f}; {} entries of other models or settings left alone)",
               cfg_.disk_dir, ns, disk_->entries(), double(disk_->bytes_used()) / double(1ull << 30),
               double(cfg_.disk_bytes) / double(1ull << 30), foreign_entries_);
  block_bytes_ = memory_.kv_bytes_per_block(cfg_.block_size);
  block_buf_.resize(std::max<size_t>(block_bytes_, 1));
  // Evicted entries are still intact when the hooks run: copy them out before they are reused.
  pool_.set_evict_hook([this](int32_t id, uint64_t h) { write_block_to_disk(id, h); });
  snapshots_->set_evict_hook([this](uint64_t h, const void* st) { write_state_to_disk(h, st); });
}

PrefixCache::~PrefixCache() = default;

uint64_t PrefixCache::count_foreign_entries(const std::string& dir, const std::string& own) {
  namespace fs = std::filesystem;
  uint64_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    const auto st = it->symlink_status(e2);
    if (e2) continue;
    if (fs::is_directory(st) && it->path().filename() != own) {
      for (fs::directory_iterator sub(it->path(), e2); !e2 && sub != end; sub.increment(e2)) ++n;
    } else if (fs::is_regular_file(st) && it->path().extension() == ".dst") {
      ++n;  // the flat layout of earlier versions, keyed without the weights' content
    }
  }
  return n;
}

// ---- lookup ----

bool PrefixCache::block_cached(uint64_t h) const {
  // Without attention layers a block holds nothing, so the tier "has" every block.
  return pool_.find(h) >= 0 || (disk_ && (block_bytes_ == 0 || disk_->contains(DiskTier::Kind::Block, h)));
}

bool PrefixCache::state_cached(uint64_t h, int restores_planned) const {
  if (snapshots_->contains(h)) return true;
  // A state loaded from the tier goes into the store, whose least recently used entry it
  // replaces. Restores claimed this step point into the store and are its most recent entries;
  // with room for twice as many, the entry replaced is never one of them.
  return disk_ && snapshots_->capacity() >= 2 * (restores_planned + 1) && disk_->contains(DiskTier::Kind::State, h);
}

bool PrefixCache::load_block_from_disk(int32_t id, uint64_t h) {
  if (block_bytes_ == 0) return true;
  if (!disk_->get(DiskTier::Kind::Block, h, block_buf_.data(), block_bytes_)) return false;
  memory_.load_block(id, block_buf_.data());
  ++disk_loads_;
  return true;
}

bool PrefixCache::load_state_from_disk(uint64_t h) {
  if (!disk_) return false;
  void* dst = snapshots_->insert(h);
  if (dst == nullptr) return false;
  if (!disk_->get(DiskTier::Kind::State, h, dst, snapshots_->state_bytes())) {
    snapshots_->erase(h);
    return false;
  }
  ++disk_loads_;
  return true;
}

int PrefixCache::resume(std::span<const int32_t> tokens, PrefixCursor* cur, std::vector<int32_t>* blocks,
                        int restores_planned) {
  assert(blocks->empty());
  cur->snapshot_points.clear();
  cur->next_snapshot = 0;
  cur->num_published = 0;
  if (!cfg_.enabled) return 0;
  const int bs = cfg_.block_size;
  const int len = int(tokens.size());
  extend_block_hashes(key_, cfg_.seed, tokens, bs, &cur->block_hashes);
  const auto& h = cur->block_hashes;
  // Retried when a tier entry proves unreadable: the tier has forgotten it, so the next look
  // finds a shorter prefix, and the loop ends.
  for (;;) {
    int kv = 0;
    while (kv < int(h.size()) && block_cached(h[size_t(kv)])) ++kv;
    // At least one token must be computed: its logits give the first new token.
    int resume = 0;
    for (int b = std::min(kv, (len - 1) / bs); b > 0; --b) {
      if (state_cached(h[size_t(b - 1)], restores_planned)) {
        resume = b;
        break;
      }
    }
    bool readable = resume == 0 || snapshots_->contains(h[size_t(resume - 1)]) || load_state_from_disk(h[size_t(resume - 1)]);
    for (int i = 0; readable && i < resume; ++i) {
      int32_t id = pool_.acquire(h[size_t(i)]);
      if (id < 0) {  // only the tier has it
        id = pool_.allocate();
        if (id < 0) {
          pool_.release_all(blocks);
          return -1;
        }
        if (!load_block_from_disk(id, h[size_t(i)])) {
          pool_.release(id);
          readable = false;
          break;
        }
        pool_.publish(id, h[size_t(i)]);
      }
      blocks->push_back(id);
    }
    if (readable) {
      cur->num_published = resume;
      plan_snapshot_points(cur, len, resume, kv);
      return resume * bs;
    }
    pool_.release_all(blocks);
  }
}

const void* PrefixCache::claim_state(const PrefixCursor& cur, int pos) {
  if (stateless()) return nullptr;
  return snapshots_->find(cur.block_hashes[size_t(pos / cfg_.block_size - 1)]);
}

// ---- snapshot planning ----

void PrefixCache::plan_snapshot_points(PrefixCursor* cur, int len, int resume_blocks, int kv_blocks) const {
  if (snapshots_->stateless()) return;  // nothing to save: any cached boundary resumes
  const int bs = cfg_.block_size;
  const int start = resume_blocks * bs;
  auto& pts = cur->snapshot_points;
  // Where the cached KV ends but the state was not saved: prompts sharing this prefix branch
  // here, and the next one can resume here instead of at the last snapshot.
  if (kv_blocks > resume_blocks) pts.push_back(kv_blocks * bs);
  if (cfg_.snapshot_interval > 0) {
    const int step = cfg_.snapshot_interval * bs;
    for (int p = (start / step + 1) * step; p <= len; p += step) pts.push_back(p);
  }
  // The prompt's end, aligned down: the next turn resumes here. When the prompt fills its last
  // block, also the boundary before it, where the same prompt sent again resumes (a resume
  // must leave one token to compute).
  pts.push_back(len / bs * bs);
  pts.push_back((len - 1) / bs * bs);
  std::sort(pts.begin(), pts.end());
  pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
  pts.erase(pts.begin(), std::upper_bound(pts.begin(), pts.end(), start));
}

int PrefixCache::chunk_end(const PrefixCursor& cur, int from, int end, int len) const {
  const int bs = cfg_.block_size;
  if (cur.next_snapshot < cur.snapshot_points.size() && cur.snapshot_points[cur.next_snapshot] < end) {
    end = cur.snapshot_points[cur.next_snapshot];
  } else if (end < len) {
    const int aligned = end / bs * bs;
    if (aligned > from) end = aligned;  // a budget under one block still makes progress
  }
  return end;
}

std::optional<uint64_t> PrefixCache::chunk_snapshot(PrefixCursor* cur, int end) {
  // chunk_end() stops every chunk at the next snapshot point, so a point is either the chunk's
  // end or still ahead.
  const auto& pts = cur->snapshot_points;
  std::optional<uint64_t> save;
  if (cur->next_snapshot < pts.size() && pts[cur->next_snapshot] == end) {
    ++cur->next_snapshot;
    const uint64_t h = cur->block_hashes[size_t(end / cfg_.block_size - 1)];
    if (!snapshots_->contains(h)) save = h;
  }
  assert(cur->next_snapshot >= pts.size() || pts[cur->next_snapshot] > end);
  return save;
}

std::optional<uint64_t> PrefixCache::decode_snapshot(std::span<const int32_t> tokens, PrefixCursor* cur, int end) {
  const int bs = cfg_.block_size;
  if (!cfg_.enabled || !cfg_.decode_snapshots || stateless() || end % bs != 0) return std::nullopt;
  extend_block_hashes(key_, cfg_.seed, tokens, bs, &cur->block_hashes);
  const uint64_t h = cur->block_hashes[size_t(end / bs - 1)];
  if (cur->decode_snapshot) snapshots_->erase(*cur->decode_snapshot);
  cur->decode_snapshot = h;
  if (snapshots_->contains(h)) return std::nullopt;
  return h;
}

// ---- after the forward ----

void PrefixCache::publish(std::span<const int32_t> tokens, PrefixCursor* cur, std::span<const int32_t> blocks,
                          int computed, bool decoded) {
  if (!cfg_.enabled) return;
  const int bs = cfg_.block_size;
  const int full = computed / bs;
  if (full <= cur->num_published) return;
  // Decode computes a block's KV one row at a time, which differs from a prefill of the same
  // tokens in rounding; without decode snapshots nothing decode made is shared, so every reused
  // value is bit-identical to recomputing it.
  if (decoded && !cfg_.decode_snapshots) {
    cur->num_published = full;
    return;
  }
  extend_block_hashes(key_, cfg_.seed, tokens, bs, &cur->block_hashes);
  for (int b = cur->num_published; b < full; ++b) pool_.publish(blocks[size_t(b)], cur->block_hashes[size_t(b)]);
  cur->num_published = full;
}

void PrefixCache::restore_state(int slot, const void* state) {
  memory_.load_state(slot, state);
  ++restores_;
}

void PrefixCache::save_state(int slot, uint64_t hash) {
  void* dst = snapshots_->insert(hash);
  if (dst == nullptr) return;  // a store with no room
  memory_.save_state(slot, dst);
  ++saves_;
}

// ---- disk tier ----

bool PrefixCache::write_block_to_disk(int32_t id, uint64_t h) {
  if (block_bytes_ == 0 || disk_->contains(DiskTier::Kind::Block, h)) return false;
  memory_.save_block(id, block_buf_.data());
  disk_->put(DiskTier::Kind::Block, h, block_buf_.data(), block_bytes_);
  return true;
}

bool PrefixCache::write_state_to_disk(uint64_t h, const void* state) {
  if (disk_->contains(DiskTier::Kind::State, h)) return false;
  disk_->put(DiskTier::Kind::State, h, state, snapshots_->state_bytes());
  return true;
}

void PrefixCache::flush() {
  if (!disk_) return;
  size_t blocks = 0, states = 0;
  pool_.for_each_published([&](int32_t id, uint64_t h) { blocks += write_block_to_disk(id, h); });
  snapshots_->for_each([&](uint64_t h, const void* st) { states += write_state_to_disk(h, st); });
  spdlog::info("disk tier: wrote {} blocks and {} states at shutdown ({} entries, {:.3f} GiB)", blocks, states,
               disk_->entries(), double(disk_->bytes_used()) / double(1ull << 30));
}

std::array<CacheCounter, PrefixCache::kNumCounters> PrefixCache::counters() const {
  return {{
      {"state_snapshot_saves_total", "Recurrent-state snapshots saved at block boundaries", saves_},
      {"state_snapshot_restores_total", "Recurrent-state snapshots loaded to resume a prompt", restores_},
      {"state_snapshot_evictions_total", "State snapshots evicted to make room (least recently used)",
       snapshots_ ? snapshots_->num_evictions() : 0},
      {"prefix_cache_block_evictions_total", "Cached KV blocks evicted to make room (least recently released)",
       pool_.num_evictions()},
      {"disk_tier_loads_total", "KV blocks and state snapshots read back from the disk tier to resume a prompt",
       disk_loads_},
      {"disk_tier_foreign_entries_total",
       "Disk-tier entries found at start-up that belong to other weights or settings (never loaded)", foreign_entries_},
  }};
}

}  // namespace ds
