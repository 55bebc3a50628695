#pragma once
// glibc malloc's defaults cost a gateway that holds request bodies of hundreds of KiB for the length of a request:
// a block over M_MMAP_THRESHOLD (128 KiB at first; raised, at most to 32 MiB, to the size of each mmapped block
// freed) is mapped and unmapped per request, and a thread's heap whose free top exceeds M_TRIM_THRESHOLD (twice
// the mmap threshold) is trimmed with madvise(MADV_DONTNEED) on free: the next body faults every page in again
// and the kernel zero-fills it. Measured on 256 KiB prompts (docs/benchmarks.md, "One and two event loops, and glibc's allocator"), that was
// about half of prefixgate's CPU per request, and more with two event loops than with one.
//
// tuneAllocator sets both thresholds once at start-up (which also stops glibc's dynamic adjustment): blocks up to
// kHeapBlockBytes come from the heap, and a heap keeps up to kKeptFreeBytes of free top memory for the next
// request instead of giving it back at once. One huge request still gives its memory back (its blocks are mapped),
// and so does a heap whose free top grew past the bound. An operator's own GLIBC_TUNABLES glibc.malloc.* settings
// win: nothing is changed then.
#include <cstddef>
#include <string>

namespace prefixgate::util {

inline constexpr size_t kHeapBlockBytes = size_t{8} << 20;
inline constexpr size_t kKeptFreeBytes = size_t{32} << 20;

// Applies the thresholds unless `tunables` (the GLIBC_TUNABLES environment variable, or null) sets any
// glibc.malloc tunable. Returns a line for the start-up log saying what was done.
std::string tuneAllocator(const char* tunables);

}  // namespace prefixgate::util
