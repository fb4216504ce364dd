// Memory for large, long-lived buffers that kernels stream (the KV pool, packed weights):
// aligned to 2 MiB and offered to the kernel's transparent huge pages (madvise), so a stream
// costs one TLB entry per 2 MiB instead of 512. Decode attention over a KV cache larger than
// the L3, blocks scattered as the pool hands them out, read 25 GB/s with 4 KiB pages and 34 with
// huge ones (micro_bench BM_DecodeAttentionServed/64/640/0/{0,1}). Where the system's THP
// setting is "never" the advice is ignored and nothing else changes.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <memory>

namespace ds {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using LargeBuffer = std::unique_ptr<std::byte[], FreeDeleter>;

// At least `bytes` (not zeroed), 64-byte aligned; from 2 MiB up, 2 MiB-aligned with huge pages
// advised. Throws ds::Error when the memory cannot be had.
LargeBuffer allocate_large(size_t bytes);

}  // namespace ds
