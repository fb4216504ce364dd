#include "core/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <string>

#include "core/error.h"

namespace ds {

LargeBuffer allocate_large(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  const size_t rounded = std::max<size_t>(align, (bytes + align - 1) / align * align);
  void* p = std::aligned_alloc(align, rounded);
  DS_CHECK(p, "cannot allocate " + std::to_string(bytes) + " bytes");
  if (align == kHuge) (void)madvise(p, rounded, MADV_HUGEPAGE);  // advice only: ignored where THP is off
  return LargeBuffer(static_cast<std::byte*>(p));
}

}  // namespace ds
