// The disk tier behind the KV pool and the state snapshots (docs/prefix-cache.md): what they
// evict is written here, keyed by its chained block hash, and read back when a later prompt
// needs it. One file per entry with a checksummed header; the folder is indexed at start-up, so
// the cache survives a restart. A missing, truncated or corrupt entry is a miss (and is
// deleted), never a crash and never a wrong answer. The folder is untrusted: files are created
// exclusively without following links, 0600, and only regular files are ever read. Bounded by
// a byte budget, oldest written first out. Owned by the engine thread: no locks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>

namespace ds {

// The folder must be a real folder (not a link), owned by the server's user and writable by
// nobody else; it is created 0700 when missing. Throws ds::Error naming what is wrong.
void ensure_private_dir(const std::string& dir);

class DiskTier {
 public:
  enum class Kind : uint8_t { Block = 1, State = 2 };

  // Creates dir if needed (0700) and indexes the entries already there (oldest first by mtime;
  // anything but a regular file is skipped and counted). Throws ds::Error when dir cannot be
  // created or read, or is not safe to trust (ensure_private_dir).
  DiskTier(std::string dir, uint64_t budget_bytes);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  bool contains(Kind kind, uint64_t hash) const { return index_.count(key(kind, hash)) > 0; }
  // Writes an entry of `bytes` bytes (replacing one under the same key), then drops the oldest
  // entries beyond the budget. A failed write (disk full) only loses the entry.
  void put(Kind kind, uint64_t hash, const void* data, size_t bytes);
  // Reads an entry of exactly `bytes` bytes into dst. False, with the entry deleted, when it is
  // absent, truncated, of another size or fails its checksum.
  bool get(Kind kind, uint64_t hash, void* dst, size_t bytes);

  size_t entries() const { return index_.size(); }
  uint64_t bytes_used() const { return used_; }
  uint64_t num_writes() const { return writes_; }
  uint64_t num_reads() const { return reads_; }
  uint64_t num_corrupt() const { return corrupt_; }
  uint64_t num_skipped() const { return skipped_; }  // non-regular files found at start-up

 private:
  struct Key {
    uint64_t hash;
    Kind kind;
    bool operator==(const Key& o) const { return hash == o.hash && kind == o.kind; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return size_t(k.hash ^ uint64_t(k.kind)); }
  };
  struct Entry {
    uint64_t file_bytes;
    std::list<Key>::iterator age;
  };
  static Key key(Kind kind, uint64_t hash) { return {hash, kind}; }
  static std::string name(const Key& k);
  void drop(Key k);  // by value: callers pass order_.front(), which drop erases

  std::string dir_;
  int dir_fd_ = -1;  // every file is opened relative to this, never through a path
  uint64_t budget_;
  uint64_t used_ = 0;
  std::unordered_map<Key, Entry, KeyHash> index_;
  std::list<Key> order_;  // oldest written first
  uint64_t writes_ = 0, reads_ = 0, corrupt_ = 0, skipped_ = 0;
};

}  // namespace ds
