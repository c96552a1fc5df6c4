// A transport::Connection for the fuzz harnesses: nothing goes on a wire. Sends are checked the way
// a real backend would see them (header length == payload length, the header encodes and decodes)
// and then held, not completed: the payload must stay unchanged until on_done runs, so CompleteAll
// re-reads it and aborts if the sender freed (ASan) or modified it while in flight.
// Close behaves like tcp::TcpConnection::Close: once, synchronous, OnClose on the handler, then the
// pending sends fail with the reason.
// Threading: Send from any thread (the server's shard threads); everything else on the harness
// thread.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace byteps::fuzz {

// Aborts with a message: a fuzz finding (the harness's own invariant is the server's contract).
[[noreturn]] void Fail(const char* what, const char* file, int line);
#define FUZZ_CHECK(cond)                                     \
  do {                                                       \
    if (!(cond)) ::byteps::fuzz::Fail(#cond, __FILE__, __LINE__); \
  } while (0)

class FakeConnection : public transport::Connection {
 public:
  // Extra checks on every frame sent (e.g. "a server only sends replies"); runs on the sender's
  // thread before the frame is accepted.
  using SendCheck = void (*)(const protocol::Header& header, const std::vector<iovec>& payload);

  // handler is borrowed; it gets OnClose when Close runs (Detach first to stop that).
  FakeConnection(std::string name, transport::Handler* handler, SendCheck check);
  ~FakeConnection() override;

  Status Send(const protocol::Header& header, const std::vector<iovec>& payload,
              transport::SendCallback on_done) override;
  void Close(const Status& reason) override;
  bool closed() const override { return closed_.load(); }
  std::string peer_name() const override;
  void set_peer_name(std::string name) override;

  // Completes every held send with OK after checking its payload is unchanged.
  void CompleteAll();
  // Marks the connection closed without calling the handler (the handler is going away).
  void Detach();
  uint64_t frames_sent() const;

 private:
  struct Pending {
    protocol::Header header;
    std::vector<iovec> payload;
    uint64_t digest;
    transport::SendCallback on_done;
  };
  std::vector<Pending> TakePending();

  transport::Handler* handler_;
  const SendCheck check_;
  std::atomic<bool> closed_{false};
  mutable std::mutex mu_;
  std::string name_;              // guarded by mu_
  std::vector<Pending> pending_;  // guarded by mu_
  uint64_t frames_sent_ = 0;      // guarded by mu_
};

}  // namespace byteps::fuzz
