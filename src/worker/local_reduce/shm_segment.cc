#include "worker/local_reduce/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace byteps::worker::local_reduce {
namespace {

StatusOr<uint8_t*> Map(int fd, size_t bytes, const std::string& name) {
  // mmap of 0 bytes is invalid; an empty tensor still gets a (one-page) segment.
  void* p = ::mmap(nullptr, bytes == 0 ? 1 : bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return Unavailable(fmt::format("mmap of shared memory {} ({} bytes): {}", name, bytes, std::strerror(errno)));
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

std::string ShmSegment::Name(int creator_pid, const std::string& job, const std::string& suffix) {
  return fmt::format("/byteps-{}-{}-{}", creator_pid, job, suffix);
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name, size_t bytes) {
  ::shm_unlink(name.c_str());
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(fmt::format("cannot create shared memory {}: {}", name, std::strerror(errno)));
  if (::ftruncate(fd, static_cast<off_t>(bytes == 0 ? 1 : bytes)) != 0) {
    int e = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    return Unavailable(fmt::format("cannot size shared memory {} to {} bytes: {} (is /dev/shm full?)", name, bytes,
                                   std::strerror(e)));
  }
  auto p = Map(fd, bytes, name);
  ::close(fd);
  if (!p.ok()) {
    ::shm_unlink(name.c_str());
    return p.status();
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, p.value(), bytes, true));
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name, size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(fmt::format("cannot open shared memory {}: {}", name, std::strerror(errno)));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    ::close(fd);
    return InvalidArgument(fmt::format("shared memory {} holds {} bytes, expected {}", name,
                                       static_cast<long long>(st.st_size), bytes));
  }
  auto p = Map(fd, bytes, name);
  ::close(fd);
  if (!p.ok()) return p.status();
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, p.value(), bytes, false));
}

ShmSegment::~ShmSegment() {
  ::munmap(data_, size_ == 0 ? 1 : size_);
  if (owner_) ::shm_unlink(name_.c_str());
}

namespace {
// Unlinks the byteps segments in /dev/shm for which `doomed(name, creator pid)` holds.
template <typename Pred>
int RemoveSegments(Pred doomed) {
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return 0;
  int removed = 0;
  while (dirent* e = ::readdir(d)) {
    int pid = 0;
    if (std::sscanf(e->d_name, "byteps-%d-", &pid) != 1 || pid <= 0) continue;
    if (!doomed(std::string(e->d_name), pid)) continue;
    if (::shm_unlink(("/" + std::string(e->d_name)).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}
}  // namespace

bool ShmSegment::ProcessGone(int pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;  // EPERM: alive, not ours to judge
  // Killed but not yet reaped by its parent: a zombie maps nothing any more.
  FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
  if (f == nullptr) return false;
  char state = 0;
  const int got = std::fscanf(f, "%*d (%*[^)]) %c", &state);
  std::fclose(f);
  return got == 1 && (state == 'Z' || state == 'X');
}

int ShmSegment::RemoveStale() {
  return RemoveSegments([](const std::string&, int pid) { return ProcessGone(pid); });
}

int ShmSegment::RemoveCreatedBy(int creator_pid, const std::string& job) {
  std::string prefix = Name(creator_pid, job, "").substr(1);  // "byteps-<pid>-<job>-"
  return RemoveSegments([&](const std::string& name, int) { return name.starts_with(prefix); });
}

}  // namespace byteps::worker::local_reduce
