// A loopback TCP relay for fault tests: forwards every accepted connection to an upstream port,
// optionally holding every byte back for a fixed delay each way (a long link: the round trip
// grows by twice the delay, the bandwidth stays loopback's), and can reset all current
// connections (RST both ways) or refuse new ones on demand. Tests order
// themselves by its counters (connections relayed, connections refused), waiting with a deadline.
// Threading: public methods are thread-safe. One thread accepts, one thread per connection pair
// forwards (blocking I/O with poll).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace byteps::testing {

class TcpRelay {
 public:
  explicit TcpRelay(int upstream_port, std::chrono::milliseconds delay = std::chrono::milliseconds{0});
  ~TcpRelay();
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  int port() const { return port_; }
  // Aborts every current connection pair with a reset on both sides.
  void ResetAll();
  // While on, new connections are accepted and reset at once (the upstream looks dead).
  void Refuse(bool on) { refuse_ = on; }
  int resets() const { return resets_; }
  // Connections relayed / refused so far.
  int accepted() const;
  int refused() const;
  // Wait (up to `timeout`) until at least n connections were relayed / refused; false if not.
  bool WaitAccepted(int n, std::chrono::milliseconds timeout);
  bool WaitRefused(int n, std::chrono::milliseconds timeout);

 private:
  struct Pair {
    int a = -1, b = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void AcceptLoop();
  void Forward(Pair* p);

  const int upstream_port_;
  const std::chrono::milliseconds delay_;
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false}, refuse_{false};
  std::atomic<int> resets_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;                // accepted_ or refused_ grew
  std::vector<std::unique_ptr<Pair>> pairs_;  // guarded by mu_
  int accepted_ = 0;                          // guarded by mu_
  int refused_ = 0;                           // guarded by mu_
  std::thread acceptor_;
};

}  // namespace byteps::testing
