// The TCP side of a UCX connection (ucx_transport.h): the payloads of the handshake frames the two
// ends swap over the authenticated TCP connection (UcxHello, UcxReady), and the thread that closes
// those TCP connections when a UCX connection, on its worker's loop thread, asks for it.
// Threading: the codec is pure; ControlReaper's methods are thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "common/status.h"
#include "transport/transport.h"

namespace byteps::transport::ucx {

// A handshake frame's payload is ids, a token and a worker address: more is a protocol error.
inline constexpr size_t kMaxHandshakePayload = 16 * 1024;

// UcxHello's payload: the connecting side's connection id, the connection's token and the
// connecting worker's UCP address. The ids and the token are in host byte order (both ends run
// this code on the same kind of host; the TCP connection is authenticated).
struct UcxOffer {
  uint64_t conn_id = 0;
  uint64_t token = 0;
  std::string address;
};
std::string EncodeOffer(const UcxOffer& offer);
// nullopt when the payload is too short to hold an address.
std::optional<UcxOffer> ParseOffer(const std::string& payload);

// UcxReady's payload when the accepting side took the offer (header arg 0): its connection id and
// its worker's UCP address. A refusal (arg 1) carries the reason as text instead.
struct UcxAnswer {
  uint64_t conn_id = 0;
  std::string address;
};
std::string EncodeAnswer(const UcxAnswer& answer);
// nullopt when the payload is too short to hold an address.
std::optional<UcxAnswer> ParseAnswer(const std::string& payload);

// Closes TCP connections off the UCX loop threads (ucx_connection.h, ControlCloser: a TCP close
// waits for the TCP loop, so a UCX loop thread hands it here rather than block). Close queues;
// after Stop (also run by the destructor, which joins the thread) it closes at once on the
// caller's thread.
class ControlReaper {
 public:
  ControlReaper();
  ~ControlReaper();
  ControlReaper(const ControlReaper&) = delete;
  ControlReaper& operator=(const ControlReaper&) = delete;

  void Close(std::shared_ptr<Connection> c, Status reason);
  // Closes what is queued, then ends the thread. Idempotent.
  void Stop();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Connection>, Status>> queue_;  // guarded by mu_
  bool stopped_ = false;                                             // guarded by mu_
  std::thread thread_;
};

}  // namespace byteps::transport::ucx
