// A read-only memory mapping of a whole file. Weights are served straight from the page cache:
// loading a checkpoint costs no copy, and pages the forward never touches are never read.
#pragma once
#include <cstddef>
#include <span>
#include <string>

namespace ds {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` with PROT_READ + MAP_PRIVATE. `prefetch` asks the kernel to start reading the
  // whole file now (MADV_WILLNEED), which overlaps disk I/O with the rest of start-up when every
  // byte will be read anyway. Throws ds::Error naming the path and the OS error.
  static MappedFile open(const std::string& path, bool prefetch = false);

  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Null for an empty file (a zero-length mapping is not allowed by mmap).
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void release() noexcept;

  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ds
