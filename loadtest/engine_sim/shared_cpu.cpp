#include "engine_sim/shared_cpu.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace prefixgate::sim {
namespace {

constexpr size_t kFileBytes = SharedCpu::kMaxPods * 2 * sizeof(uint32_t);

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("--shared-cpu " + path + ": " + what);
}

bool processGone(uint32_t pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

}  // namespace

SharedCpu::SharedCpu(const std::string& path, std::vector<double> slowdown) : table_(std::move(slowdown)) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) fail(path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (static_cast<size_t>(st.st_size) < kFileBytes && ::ftruncate(fd, kFileBytes) != 0)) {
    int error = errno;
    ::close(fd);
    fail(path, std::strerror(error));
  }
  void* mapped = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) fail(path, std::strerror(errno));
  // A fresh file is zero bytes: free places, nobody busy. The places are lock-free atomics over that memory.
  places_ = static_cast<Place*>(mapped);
  auto pid = static_cast<uint32_t>(::getpid());
  for (size_t i = 0; i < kMaxPods && mine_ == nullptr; ++i) {
    Place& place = places_[i];
    uint32_t owner = place.owner.load();
    if (owner != 0 && !processGone(owner)) continue;
    if (place.owner.compare_exchange_strong(owner, pid)) {
      place.busy.store(0);
      mine_ = &place;
    }
  }
  if (mine_ == nullptr) {
    ::munmap(places_, kFileBytes);
    fail(path, "all " + std::to_string(kMaxPods) + " places are held by running processes");
  }
}

SharedCpu::~SharedCpu() {
  mine_->busy.store(0);
  mine_->owner.store(0);
  ::munmap(places_, kFileBytes);
}

void SharedCpu::setBusy(bool busy) {
  if (busy == busy_) return;
  busy_ = busy;
  mine_->busy.store(busy ? 1 : 0);
}

uint32_t SharedCpu::busyPods() const {
  uint32_t busy = 0;
  for (size_t i = 0; i < kMaxPods; ++i)
    if (places_[i].busy.load(std::memory_order_relaxed) != 0 && places_[i].owner.load(std::memory_order_relaxed) != 0)
      ++busy;
  return busy;
}

double SharedCpu::slowdown() const { return slowdownFor(table_, std::max<uint32_t>(1, busyPods())); }

double SharedCpu::slowdownFor(const std::vector<double>& table, uint32_t busy) {
  if (table.empty() || busy == 0) return 1.0;
  if (busy <= table.size()) return table[busy - 1];
  return table.back() * static_cast<double>(busy) / static_cast<double>(table.size());
}

}  // namespace prefixgate::sim
