// An in-memory transport for unit tests: no sockets, no I/O threads. What the code under test sends
// is captured per connection in a queue the test waits on with a deadline; what "the peer" sends,
// the test delivers itself, on its own thread, which then plays the connection's I/O thread.
// Tests run every party's role in one thread and order events explicitly, so nothing depends on
// timing.
// Threading: Send/Close/closed/peer_name and the FakeTransport methods are thread-safe. Deliver
// (and the handler callbacks it makes) must not run concurrently for one connection, as with a
// real transport; Close runs OnClose on the calling thread, synchronously.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace byteps::testing {

// How long a test waits for something that must happen (it normally takes microseconds).
inline constexpr std::chrono::milliseconds kEventWait{10000};

// A frame as it was sent: the header and a copy of the payload at the time of the Send.
struct SentFrame {
  protocol::Header header;
  std::string payload;
};

class FakeConnection : public transport::Connection {
 public:
  // handler (borrowed) gets the frames the test delivers and the OnClose.
  FakeConnection(std::string peer, transport::Handler* handler);
  ~FakeConnection() override;

  Status Send(const protocol::Header& header, const std::vector<iovec>& payload,
              transport::SendCallback on_done) override;
  // Once: marks the connection closed, runs the handler's OnClose, then fails held sends.
  void Close(const Status& reason) override;
  bool closed() const override;
  std::string peer_name() const override;
  void set_peer_name(std::string name) override;

  // ---- the test's side ----
  // The next frame sent on this connection, waiting up to `timeout`; nullopt if none came.
  std::optional<SentFrame> NextSent(std::chrono::milliseconds timeout = kEventWait);
  // Frames sent and not taken yet, without waiting.
  std::vector<SentFrame> TakeSent();
  // Delivers a frame from the peer as the transport would: OnHeader, the payload copied where it
  // chose, OnFrame. An OnHeader error closes the connection with it (and is returned).
  Status Deliver(protocol::Header header, const std::string& payload = "");
  // While on, sends are not completed: their payload stays borrowed until CompleteHeld (like
  // bytes still in a slow socket).
  void HoldSends(bool on);
  // The bytes the held sends' payloads point at now, oldest first.
  std::vector<std::string> HeldPayloads() const;
  // Completes the held sends with OK.
  void CompleteHeld();

 private:
  struct Held {
    std::vector<iovec> payload;
    transport::SendCallback on_done;
  };

  transport::Handler* const handler_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string peer_;               // guarded by mu_
  bool closed_ = false;            // guarded by mu_
  bool hold_ = false;              // guarded by mu_
  std::deque<SentFrame> sent_;     // guarded by mu_
  std::deque<Held> held_;          // guarded by mu_
};

class FakeTransport : public transport::Transport {
 public:
  ~FakeTransport() override;

  // Records the handler; returns `port`, or 1 for an ephemeral one.
  StatusOr<int> Listen(const std::string& host, int port, transport::Handler* handler) override;
  // A new FakeConnection to host:port for `handler` (Unavailable while RefuseConnects is on).
  StatusOr<std::shared_ptr<transport::Connection>> Connect(const std::string& host, int port,
                                                           transport::Handler* handler,
                                                           double timeout_s) override;
  StatusOr<int> ListenLocal(const std::string& name, transport::Handler* handler) override;
  StatusOr<std::shared_ptr<transport::Connection>> ConnectLocal(const std::string& name,
                                                                transport::Handler* handler,
                                                                double timeout_s) override;
  // Closes every connection made or accepted. Idempotent.
  void Shutdown() override;

  // ---- the test's side ----
  // A connection the listener accepted from `peer`: its frames go to the Listen handler.
  std::shared_ptr<FakeConnection> Accept(const std::string& peer);
  // The next connection made with Connect, waiting up to `timeout`; nullptr if none came.
  std::shared_ptr<FakeConnection> NextConnect(std::chrono::milliseconds timeout = kEventWait);
  void RefuseConnects(bool on);

 private:
  std::shared_ptr<FakeConnection> Add(std::string peer, transport::Handler* handler, bool connected);

  std::mutex mu_;
  std::condition_variable cv_;
  transport::Handler* listener_ = nullptr;            // guarded by mu_
  bool refuse_ = false;                               // guarded by mu_
  std::vector<std::shared_ptr<FakeConnection>> all_;  // guarded by mu_
  std::deque<std::shared_ptr<FakeConnection>> connected_;  // made by Connect, not yet taken
};

}  // namespace byteps::testing
