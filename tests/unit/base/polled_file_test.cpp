// PolledFile: a rewrite calls back once with the new text; an unchanged or unreadable file does not.
#include "util/polled_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace prefixgate::util {
namespace {

void writeFile(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// Runs `io` for at most `limit` of wall time or until `done` holds.
template <class Done>
void runUntil(boost::asio::io_context& io, std::chrono::milliseconds limit, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) io.run_for(std::chrono::milliseconds(5));
}

TEST(PolledFile, CallsBackOnceForEachNewContent) {
  // Per process: the release and the sanitizer builds' tests may run at the same time.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("prefixgate_polled_file_" + std::to_string(getpid()))).string();
  writeFile(path, "first");
  boost::asio::io_context io;
  std::vector<std::string> seen;
  PolledFile file(io, path, std::chrono::milliseconds(5), [&](const std::string& text) { seen.push_back(text); });
  file.start("first");
  runUntil(io, std::chrono::milliseconds(60), [] { return false; });
  EXPECT_TRUE(seen.empty());  // the content in force: nothing to report
  writeFile(path, "second");
  runUntil(io, std::chrono::milliseconds(2000), [&] { return !seen.empty(); });
  ASSERT_EQ(seen, std::vector<std::string>{"second"});
  std::filesystem::remove(path);  // unreadable: what is in force stays, no call
  runUntil(io, std::chrono::milliseconds(60), [] { return false; });
  EXPECT_EQ(seen.size(), 1u);
  writeFile(path, "second");  // back to the same content: still no call
  runUntil(io, std::chrono::milliseconds(60), [] { return false; });
  EXPECT_EQ(seen.size(), 1u);
  file.stop();
  writeFile(path, "third");  // stopped: no more polls
  runUntil(io, std::chrono::milliseconds(60), [] { return false; });
  EXPECT_EQ(seen.size(), 1u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace prefixgate::util
