#include "transport/tcp/event_loop.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>

#include "common/logging.h"

namespace byteps::transport::tcp {

EventLoop::EventLoop(std::string name) : name_(std::move(name)) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  BYTEPS_CHECK(epfd_ >= 0 && wakefd_ >= 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wakefd_;
  BYTEPS_CHECK(epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev) == 0);
  thread_ = std::thread([this] { Run(); });
}

EventLoop::~EventLoop() {
  Stop();
  close(epfd_);
  close(wakefd_);
}

bool EventLoop::Add(int fd, uint32_t events, FdCallback cb) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_[fd] = std::make_shared<FdCallback>(std::move(cb));
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_.erase(fd);
    return false;
  }
  return true;
}

bool EventLoop::Modify(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  return epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) == 0;
}

void EventLoop::Remove(int fd) {
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  callbacks_.erase(fd);
}

bool EventLoop::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_) return false;
    tasks_.push_back(std::move(task));
  }
  uint64_t one = 1;
  ssize_t ignored = write(wakefd_, &one, sizeof(one));
  (void)ignored;
  return true;
}

void EventLoop::RunSync(const std::function<void()>& task) {
  if (InLoopThread()) {
    task();
    return;
  }
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  bool posted = Post([&] {
    task();
    std::lock_guard<std::mutex> lock(m);
    done = true;
    cv.notify_one();
  });
  if (!posted) {
    task();
    return;
  }
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return done; });
}

void EventLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  uint64_t one = 1;
  ssize_t ignored = write(wakefd_, &one, sizeof(one));
  (void)ignored;
  if (thread_.joinable() && !InLoopThread()) thread_.join();
}

void EventLoop::Run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  for (;;) {
    int timeout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      timeout = stopping_ ? 0 : -1;  // when stopping, drain what is ready and leave
    }
    int n = epoll_wait(epfd_, events, kMaxEvents, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      BYTEPS_LOG(Error, "{}: epoll_wait failed: errno {}", name_, errno);
      return;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wakefd_) {
        uint64_t v;
        ssize_t ignored = read(wakefd_, &v, sizeof(v));
        (void)ignored;
        continue;
      }
      std::shared_ptr<FdCallback> cb;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = callbacks_.find(fd);
        if (it != callbacks_.end()) cb = it->second;
      }
      if (cb) (*cb)(events[i].events);
    }
    std::vector<std::function<void()>> tasks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks.swap(tasks_);
      if (stopping_ && tasks.empty()) {
        running_ = false;  // from now on Post refuses and RunSync runs inline
        return;
      }
    }
    for (auto& t : tasks) t();
  }
}

}  // namespace byteps::transport::tcp
