#include "cache/disk_tier.h"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

// Reads or writes all of n bytes; false on an error or a short count.
bool read_all(int fd, void* dst, size_t n) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}
bool write_all(int fd, const void* src, size_t n) {
  auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

}  // namespace

void ensure_private_dir(const std::string& dir) {
  const std::string what = "--disk-tier-dir " + dir;
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0) {
    DS_CHECK(errno == ENOENT, what + ": " + std::strerror(errno));
    // Missing components are created 0700; an existing parent is the operator's choice.
    std::error_code ec;
    const fs::path parent = fs::path(dir).parent_path();
    if (!parent.empty() && !fs::exists(parent, ec)) {
      fs::create_directories(parent, ec);
      DS_CHECK(!ec, what + ": cannot create the folder: " + ec.message());
    }
    DS_CHECK(::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST, what + ": cannot create the folder: " + std::strerror(errno));
    DS_CHECK(::lstat(dir.c_str(), &st) == 0, what + ": " + std::strerror(errno));
  }
  // The folder holds what the server will load into its cache and where it writes as its own
  // user: a link could redirect those writes, and a folder others can write lets them plant or
  // swap entries. Refuse both rather than trust them.
  DS_CHECK(!S_ISLNK(st.st_mode), what + " is a symbolic link; give the folder itself");
  DS_CHECK(S_ISDIR(st.st_mode), what + " is not a folder");
  DS_CHECK(st.st_uid == ::geteuid(), what + " belongs to uid " + std::to_string(st.st_uid) + ", not to the server's uid " +
                                         std::to_string(::geteuid()));
  DS_CHECK((st.st_mode & 022) == 0, what + " can be written by other users (mode " + [&] {
    char m[8];
    std::snprintf(m, sizeof m, "%04o", unsigned(st.st_mode & 07777));
    return std::string(m);
  }() + "); use a folder only the server's user can write (chmod 700)");
}

DiskTier::DiskTier(std::string dir, uint64_t budget_bytes) : dir_(std::move(dir)), budget_(budget_bytes) {
  ensure_private_dir(dir_);
  dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DS_CHECK(dir_fd_ >= 0, "--disk-tier-dir " + dir_ + ": cannot open the folder: " + std::strerror(errno));
  struct Found {
    Key k;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  fs::directory_iterator it(dir_, ec), end;
  DS_CHECK(!ec, "--disk-tier-dir " + dir_ + ": cannot read the folder: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    uint64_t h = 0;
    Kind kind = Kind::Block;
    if (!parse_name(it->path().filename().string(), &h, &kind)) continue;  // not ours (.tmp, other files)
    // Only regular files: a link (dangling, looping or not) or anything else is skipped and
    // counted, never followed.
    std::error_code e2;
    const auto st = it->symlink_status(e2);
    if (e2 || !fs::is_regular_file(st)) {
      ++skipped_;
      continue;
    }
    const uint64_t size = it->file_size(e2);
    const auto mtime = e2 ? fs::file_time_type{} : it->last_write_time(e2);
    if (e2) {
      ++skipped_;
      continue;
    }
    found.push_back({key(kind, h), size, mtime});
  }
  DS_CHECK(!ec, "--disk-tier-dir " + dir_ + ": cannot read the folder: " + ec.message());
  if (skipped_) spdlog::warn("disk tier: {}: skipped {} entries that are not regular files", dir_, skipped_);
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  for (const Found& f : found) {
    order_.push_back(f.k);
    index_[f.k] = Entry{f.bytes, std::prev(order_.end())};
    used_ += f.bytes;
  }
  while (used_ > budget_ && !order_.empty()) drop(order_.front());
}

DiskTier::~DiskTier() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::string DiskTier::name(const Key& k) {
  char name[32];
  std::snprintf(name, sizeof name, "%c-%016llx.dst", k.kind == Kind::Block ? 'b' : 's',
                static_cast<unsigned long long>(k.hash));
  return name;
}

void DiskTier::drop(Key k) {
  auto it = index_.find(k);
  if (it == index_.end()) return;
  used_ -= it->second.file_bytes;
  order_.erase(it->second.age);
  index_.erase(it);
  ::unlinkat(dir_fd_, name(k).c_str(), 0);  // removes a link itself, never its target
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
  // Written under a temporary name and renamed: a crash mid-write leaves no entry, not a torn
  // one. Created relative to the folder's descriptor, exclusively and without following links,
  // so nothing planted in the folder can redirect the write; 0600, only the server reads it.
  const std::string final_name = name(k), tmp = final_name + ".tmp";
  ::unlinkat(dir_fd_, tmp.c_str(), 0);  // a stale or planted temporary goes first
  const int fd = ::openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  if (ok) ok = write_all(fd, &h, sizeof h) && write_all(fd, data, bytes);
  if (fd >= 0) ok = (::close(fd) == 0) && ok;
  if (ok) ok = ::renameat(dir_fd_, tmp.c_str(), dir_fd_, final_name.c_str()) == 0;
  if (!ok) {
    ::unlinkat(dir_fd_, tmp.c_str(), 0);
    spdlog::warn("disk tier: cannot write {}/{} ({} bytes); the entry is dropped", dir_, final_name, file_bytes);
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
  const int fd = ::openat(dir_fd_, name(k).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  Header h{};
  char extra;
  bool ok = fd >= 0 && read_all(fd, &h, sizeof h) && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 &&
            h.hash == hash && h.kind == uint32_t(kind) && h.payload_bytes == bytes && read_all(fd, dst, bytes) &&
            ::read(fd, &extra, 1) == 0 && XXH64(dst, bytes, 0) == h.checksum;
  if (fd >= 0) ::close(fd);
  if (!ok) {
    ++corrupt_;
    spdlog::warn("disk tier: {}/{} is missing, truncated or corrupt; treated as a miss and removed", dir_, name(k));
    drop(k);
    return false;
  }
  ++reads_;
  return true;
}

}  // namespace ds
