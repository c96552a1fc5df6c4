#include "common/report_signal.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/logging.h"

namespace byteps::report_signal {
namespace {

constexpr char kReport = 'r';
constexpr char kStop = 's';

// Written by the handler (async-signal-safe: an int read and write(2)); set before the handler
// is installed and cleared after it is taken out.
volatile sig_atomic_t g_write_fd = -1;
struct sigaction g_previous {};

void OnSignal(int sig, siginfo_t* info, void* context) {
  const int saved = errno;
  if (g_write_fd >= 0) {
    const char c = kReport;
    (void)!write(g_write_fd, &c, 1);  // a full pipe already holds a request: nothing is lost
  }
  errno = saved;
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
  }
}

struct State {
  std::mutex mu;                 // the callbacks and the thread's life
  std::mutex run_mu;             // held while callbacks run (Remove waits on it)
  std::map<int, std::function<void()>> callbacks;
  int next_id = 1;
  int pipe_fds[2] = {-1, -1};
  std::thread thread;
};

State& state() {
  static State* s = new State;  // never destroyed: the thread may outlive static destruction
  return *s;
}

void Run(int read_fd) {
  pthread_setname_np(pthread_self(), "bps-usr1");
  for (;;) {
    char c = 0;
    const ssize_t n = read(read_fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == kStop) return;
    State& s = state();
    std::lock_guard<std::mutex> run(s.run_mu);
    std::vector<std::function<void()>> todo;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (auto& [id, fn] : s.callbacks) todo.push_back(fn);
    }
    for (auto& fn : todo) fn();
  }
}

}  // namespace

int Add(std::function<void()> on_signal) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int id = s.next_id++;
  s.callbacks.emplace(id, std::move(on_signal));
  if (s.thread.joinable()) return id;
  if (pipe2(s.pipe_fds, O_CLOEXEC) != 0) {
    BYTEPS_LOG(Warning, "kill -USR1 will not write a report: pipe2 failed: {}", std::strerror(errno));
    return id;
  }
  fcntl(s.pipe_fds[1], F_SETFL, O_NONBLOCK);  // the handler never blocks
  g_write_fd = s.pipe_fds[1];
  struct sigaction sa {};
  sa.sa_sigaction = OnSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, &g_previous);
  const int read_fd = s.pipe_fds[0];
  s.thread = std::thread([read_fd] { Run(read_fd); });
  return id;
}

void Remove(int id) {
  State& s = state();
  std::thread stopping;
  int fds[2] = {-1, -1};
  {
    std::unique_lock<std::mutex> lock(s.mu);
    if (s.callbacks.erase(id) == 0) return;
    if (!s.callbacks.empty() || !s.thread.joinable()) {
      // Others stay registered: wait for a callback pass in flight (it may hold a copy of ours).
      // Not under mu: the pass takes run_mu, then mu.
      lock.unlock();
      std::lock_guard<std::mutex> run(s.run_mu);
      return;
    }
    sigaction(SIGUSR1, &g_previous, nullptr);
    g_write_fd = -1;
    const char c = kStop;
    while (write(s.pipe_fds[1], &c, 1) < 0 && errno == EINTR) {
    }
    stopping = std::move(s.thread);
    std::swap(fds, s.pipe_fds);
  }
  stopping.join();  // after a callback pass in flight, which runs before the stop byte is read
  close(fds[0]);
  close(fds[1]);
}

}  // namespace byteps::report_signal
