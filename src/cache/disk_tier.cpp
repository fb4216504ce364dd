#include "cache/disk_tier.h"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace ds {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'D', 'S', 'T', 'I', 'E', 'R', '0', '1'};

// Fixed header before the payload. The key is repeated inside so a renamed or mixed-up file
// cannot stand in for another entry.
struct Header {
  char magic[8];
  uint64_t hash;
  uint64_t payload_bytes;
  uint64_t checksum;  // XXH64 of the payload
  uint32_t kind;
  uint32_t reserved;
};
static_assert(sizeof(Header) == 40);

bool parse_name(const std::string& name, uint64_t* hash, DiskTier::Kind* kind) {
  // "b-<16 hex>.dst" or "s-<16 hex>.dst"
  if (name.size() != 22 || name[1] != '-' || name.substr(18) != ".dst") return false;
  if (name[0] == 'b') *kind = DiskTier::Kind::Block;
  else if (name[0] == 's') *kind = DiskTier::Kind::State;
  else return false;
  uint64_t h = 0;
  for (size_t i = 2; i < 18; ++i) {
    const char c = name[i];
    const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return false;
    h = h << 4 | uint64_t(v);
  }
  *hash = h;
  return true;
}

}  // namespace

DiskTier::DiskTier(std::string dir, uint64_t budget_bytes) : dir_(std::move(dir)), budget_(budget_bytes) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  DS_CHECK(!ec && fs::is_directory(dir_), "--disk-tier-dir " + dir_ + ": cannot create the folder: " + ec.message());
  struct Found {
    Key k;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    uint64_t h;
    Kind kind;
    if (!e.is_regular_file(ec) || !parse_name(e.path().filename().string(), &h, &kind)) continue;
    found.push_back({key(kind, h), e.file_size(ec), e.last_write_time(ec)});
  }
  DS_CHECK(!ec, "--disk-tier-dir " + dir_ + ": cannot read the folder: " + ec.message());
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  for (const Found& f : found) {
    order_.push_back(f.k);
    index_[f.k] = Entry{f.bytes, std::prev(order_.end())};
    used_ += f.bytes;
  }
  while (used_ > budget_ && !order_.empty()) drop(order_.front());
}

std::string DiskTier::path(const Key& k) const {
  char name[32];
  std::snprintf(name, sizeof name, "%c-%016llx.dst", k.kind == Kind::Block ? 'b' : 's',
                static_cast<unsigned long long>(k.hash));
  return dir_ + "/" + name;
}

void DiskTier::drop(Key k) {
  auto it = index_.find(k);
  if (it == index_.end()) return;
  used_ -= it->second.file_bytes;
  order_.erase(it->second.age);
  index_.erase(it);
  std::error_code ec;
  fs::remove(path(k), ec);
}

void DiskTier::put(Kind kind, uint64_t hash, const void* data, size_t bytes) {
  const Key k = key(kind, hash);
  drop(k);
  const uint64_t file_bytes = sizeof(Header) + bytes;
  if (file_bytes > budget_) return;
  while (used_ + file_bytes > budget_ && !order_.empty()) drop(order_.front());
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.hash = hash;
  h.payload_bytes = bytes;
  h.checksum = XXH64(data, bytes, 0);
  h.kind = uint32_t(kind);
  // Written under a temporary name and renamed: a crash mid-write leaves no entry, not a torn one.
  const std::string final_path = path(k), tmp = final_path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f != nullptr;
  if (ok) ok = std::fwrite(&h, sizeof h, 1, f) == 1 && std::fwrite(data, 1, bytes, f) == bytes;
  if (f != nullptr) ok = (std::fclose(f) == 0) && ok;
  std::error_code ec;
  if (ok) fs::rename(tmp, final_path, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    spdlog::warn("disk tier: cannot write {} ({} bytes); the entry is dropped", final_path, file_bytes);
    return;
  }
  order_.push_back(k);
  index_[k] = Entry{file_bytes, std::prev(order_.end())};
  used_ += file_bytes;
  ++writes_;
}

bool DiskTier::get(Kind kind, uint64_t hash, void* dst, size_t bytes) {
  const Key k = key(kind, hash);
  if (!index_.count(k)) return false;
  FILE* f = std::fopen(path(k).c_str(), "rb");
  Header h{};
  bool ok = f != nullptr && std::fread(&h, sizeof h, 1, f) == 1 && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 &&
            h.hash == hash && h.kind == uint32_t(kind) && h.payload_bytes == bytes &&
            std::fread(dst, 1, bytes, f) == bytes && std::fgetc(f) == EOF && XXH64(dst, bytes, 0) == h.checksum;
  if (f != nullptr) std::fclose(f);
  if (!ok) {
    ++corrupt_;
    spdlog::warn("disk tier: {} is missing, truncated or corrupt; treated as a miss and removed", path(k));
    drop(k);
    return false;
  }
  ++reads_;
  return true;
}

}  // namespace ds
