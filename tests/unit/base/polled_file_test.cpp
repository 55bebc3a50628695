// PolledFile: a rewrite calls back once with the new text; an unchanged or unreadable file does not.
#include "util/polled_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
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

// Ensures an unchanged file costs a stat() per poll and is read only every kPollsPerFullRead polls, and that a
// rewrite of the same size whose mtime is put back is still seen (its ctime moved).
TEST(PolledFile, ReadsAnUnchangedFileOnlyNowAndThen) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("prefixgate_polled_file_stat_" + std::to_string(getpid()))).string();
  writeFile(path, "aaaa");
  boost::asio::io_context io;
  std::vector<std::string> seen;
  PolledFile file(io, path, std::chrono::milliseconds(1), [&](const std::string& text) { seen.push_back(text); });
  file.start("aaaa");
  runUntil(io, std::chrono::milliseconds(5000), [&] { return file.polls() >= 5 * PolledFile::kPollsPerFullRead; });
  ASSERT_GE(file.polls(), 5u * PolledFile::kPollsPerFullRead);
  EXPECT_LE(file.reads(), file.polls() / PolledFile::kPollsPerFullRead + 1);
  EXPECT_GE(file.reads(), 1u);  // the first poll reads: nothing was stamped yet
  EXPECT_TRUE(seen.empty());

  // Right after a full read, so that the next one is kPollsPerFullRead polls away: a rewrite of the same size whose
  // mtime is put back must be seen at the next poll (its ctime moved), not only at that full read.
  const uint64_t reads_before = file.reads(), polls_before = file.polls();
  while (file.reads() == reads_before && file.polls() - polls_before < 5 * PolledFile::kPollsPerFullRead) io.run_one();
  ASSERT_GT(file.reads(), reads_before);
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  writeFile(path, "bbbb");
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  const uint64_t polls_at_write = file.polls();
  while (seen.empty() && file.polls() - polls_at_write < 3 * PolledFile::kPollsPerFullRead) io.run_one();
  ASSERT_EQ(seen, std::vector<std::string>{"bbbb"});
  EXPECT_LE(file.polls() - polls_at_write, 2u);
  file.stop();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace prefixgate::util
