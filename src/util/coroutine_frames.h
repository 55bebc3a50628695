#pragma once
// Coroutine frames of asio::awaitable<T> (the any_io_executor ones: every coroutine of the gateway) come from the
// thread's recycled blocks (util/recycling_allocator.h: free lists per size class, up to 2,048 bytes, 256 blocks
// each) instead of asio's own recycling, which keeps 2 blocks per thread (BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE)
// of at most 1,020 bytes and takes the first that fits: a thread serving 32 connections has a couple of hundred
// frames live at once, allocated and freed in batches as epoll hands it ready sockets, so almost every frame went
// to malloc (docs/benchmarks.md, "Allocations per request").
//
// Asio 1.81 has no option for it: this explicitly specializes the frame base's allocation functions for
// any_io_executor. The declarations must precede every use, so this header is force-included first in every
// translation unit of the targets linking prefixgate_base (CMakeLists.txt); a translation unit that instantiated
// asio's own version instead would pair its allocation with this deallocation.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/version.hpp>
#include <cstddef>

static_assert(BOOST_VERSION == 108100,
              "util/coroutine_frames.h specializes asio 1.81's awaitable_frame_base: check it against this Boost");

namespace boost::asio::detail {
template <>
void* awaitable_frame_base<any_io_executor>::operator new(std::size_t size);
template <>
void awaitable_frame_base<any_io_executor>::operator delete(void* pointer, std::size_t size);
}  // namespace boost::asio::detail
