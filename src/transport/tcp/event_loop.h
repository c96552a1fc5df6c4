// One epoll loop on its own named thread. Sockets are registered with a callback that runs on this
// thread; Post() runs a task here (woken through an eventfd). Idle = blocked in epoll_wait.
// Threading: Add/Modify/Remove/Post are thread-safe; callbacks run on the loop thread only.
#pragma once

#include <sys/epoll.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace byteps::transport::tcp {

class EventLoop {
 public:
  using FdCallback = std::function<void(uint32_t events)>;

  explicit EventLoop(std::string name);
  ~EventLoop();  // Stop()s
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  bool Add(int fd, uint32_t events, FdCallback cb);
  bool Modify(int fd, uint32_t events);
  // After Remove returns on the loop thread, cb is never called again. From another thread the
  // callback may be running concurrently; callers close fds on the loop thread only.
  void Remove(int fd);
  // Runs task on the loop thread. Returns false (task dropped) once the loop has stopped.
  bool Post(std::function<void()> task);
  // Runs task on the loop thread and waits for it; runs it inline when called on the loop thread
  // or after the loop stopped (then nothing else can run concurrently).
  void RunSync(const std::function<void()>& task);
  bool InLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }
  void Stop();

 private:
  void Run();

  std::string name_;
  int epfd_ = -1;
  int wakefd_ = -1;
  std::mutex mu_;
  std::unordered_map<int, std::shared_ptr<FdCallback>> callbacks_;  // guarded by mu_
  std::vector<std::function<void()>> tasks_;                         // guarded by mu_
  bool stopping_ = false;                                            // guarded by mu_
  bool running_ = true;                                              // guarded by mu_
  std::thread thread_;
};

}  // namespace byteps::transport::tcp
