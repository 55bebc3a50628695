// Coroutine frames (util/coroutine_frames.h): asio::awaitable frames are allocated from the thread's recycled
// blocks, so a frame's block is handed out again by the next allocation of its class; and coroutines still run,
// nest and return values as before.
#include "util/coroutine_frames.h"

#include <gtest/gtest.h>

#include <array>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "util/recycling_allocator.h"

namespace prefixgate::util {
namespace {
namespace asio = boost::asio;
using Frames = asio::detail::awaitable_frame_base<asio::any_io_executor>;

TEST(CoroutineFrames, AFreedFrameJoinsTheRecycledBlocks) {
  void* frame = Frames::operator new(700);
  Frames::operator delete(frame, 700);
  void* block = recycledAllocate(1000);  // the same class (513-1,024 bytes): the frame's block comes back
  EXPECT_EQ(block, frame);
  recycledDeallocate(block, 1000);
}

asio::awaitable<int> leaf(int n) { co_return n * 2; }

asio::awaitable<int> nested(int depth) {
  if (depth == 0) co_return co_await leaf(1);
  std::array<char, 1500> large{};  // a frame over asio's own 1,020-byte limit
  large[depth] = static_cast<char>(depth);
  co_return co_await nested(depth - 1) + large[depth];
}

TEST(CoroutineFrames, CoroutinesWithLargeFramesStillNestAndReturn) {
  asio::io_context io;
  int total = 0;
  for (int round = 0; round < 100; ++round)
    asio::co_spawn(io, nested(5), [&](std::exception_ptr e, int v) {
      ASSERT_FALSE(e);
      total += v;
    });
  io.run();
  EXPECT_EQ(total, 100 * (2 + 1 + 2 + 3 + 4 + 5));
}

}  // namespace
}  // namespace prefixgate::util
