// Activation memory for one forward step: sized once at start-up for the largest step the
// settings allow, reset at the start of every step. The step loop never calls malloc.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace ds {

class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t capacity) { reserve(capacity); }

  void reserve(size_t capacity) {
    buf_.reset(static_cast<std::byte*>(std::aligned_alloc(64, round_up(capacity ? capacity : 64))));
    DS_CHECK(buf_, "arena: cannot allocate " + std::to_string(capacity) + " bytes");
    cap_ = round_up(capacity ? capacity : 64);
    used_ = 0;
  }
  void reset() { used_ = 0; }
  // Scoped reuse: a layer takes its temporaries after mark() and gives them back with rewind().
  size_t mark() const { return used_; }
  void rewind(size_t m) { used_ = m; }
  size_t used() const { return used_; }
  size_t capacity() const { return cap_; }
  size_t high_water() const { return high_; }

  // 64-byte aligned, uninitialised. Running out is a sizing bug, reported with the numbers.
  template <class T>
  T* alloc(size_t count) {
    size_t bytes = round_up(count * sizeof(T));
    DS_CHECK(used_ + bytes <= cap_, "arena exhausted: need " + std::to_string(used_ + bytes) +
                                        " bytes, capacity " + std::to_string(cap_));
    T* p = reinterpret_cast<T*>(buf_.get() + used_);
    used_ += bytes;
    if (used_ > high_) high_ = used_;
    return p;
  }

  static size_t round_up(size_t n) { return (n + 63) & ~size_t(63); }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> buf_;
  size_t cap_ = 0, used_ = 0, high_ = 0;
};

}  // namespace ds
