#include "util/coroutine_frames.h"

#include "util/recycling_allocator.h"

namespace boost::asio::detail {

template <>
void* awaitable_frame_base<any_io_executor>::operator new(std::size_t size) {
  return prefixgate::util::recycledAllocate(size);
}

template <>
void awaitable_frame_base<any_io_executor>::operator delete(void* pointer, std::size_t size) {
  prefixgate::util::recycledDeallocate(pointer, size);
}

}  // namespace boost::asio::detail
