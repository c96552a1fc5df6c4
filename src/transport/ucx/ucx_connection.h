// A connection of the UCX backend: frames travel as UCP active messages on one endpoint per
// direction. The message header holds the receiver's connection id, the connection's token (both
// exchanged over the authenticated TCP connection the UCX one starts on: a message without them is
// dropped), the payload's CRC-32C when BYTEPS_CHECKSUM asks for it, and the byteps frame header.
// Payloads under kRndvMin go eagerly (copied through UCX's bounce buffers); larger ones by
// UCX's rendezvous, zero-copy from the sender's memory (registered through the worker's
// registration cache) straight into the buffer the receiver's Handler chose, over RDMA and to
// processes of this host (UCX's cma: one copy); between hosts without RDMA they go eagerly too. Frames reach the Handler in the
// order they were sent, whichever protocol carried them.
// The TCP connection stays open beside it: it is how a dead peer (kill -9 included) is noticed at
// once, with UCX's endpoint errors as a second signal.
// Threading: Send/Close/Cork/Uncork from any thread; everything else, and every Handler callback,
// on the worker's loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_worker.h"

namespace byteps::transport::ucx {

inline constexpr size_t kRndvMin = 64 * 1024;  // payloads of at least this many bytes go by rendezvous
inline constexpr uint32_t kAmFlagChecksum = 1;

// The active message's own header, ahead of the byteps frame header.
struct AmHeader {
  uint64_t conn_id = 0;  // the receiver's id for the connection
  uint64_t token = 0;    // the connection's secret token
  uint32_t flags = 0;    // kAmFlagChecksum: crc holds the payload's CRC-32C
  uint32_t crc = 0;
  protocol::Header frame;
};
inline constexpr size_t kAmHeaderBytes = 24 + protocol::kHeaderSize;
void EncodeAmHeader(const AmHeader& h, uint8_t* out);
// Validates the length and the frame header (magic, version, opcode; no payload limit: the
// connection applies its own).
StatusOr<AmHeader> ParseAmHeader(const void* data, size_t length);

// What the worker's message callback hands over (after progress returned).
struct Arrival {
  AmHeader header;
  size_t length = 0;
  void* rndv_desc = nullptr;  // rendezvous: fetch with ucp_am_recv_data_nbx
  void* data = nullptr;       // eager data UCX keeps for us (release = true) ...
  bool release = false;
  std::shared_ptr<std::vector<uint8_t>> copy;  // ... or a copy of it
};

struct UcxConnectionOptions {
  uint64_t max_payload = 1ull << 30;
  bool checksum = false;
  // Large payloads eagerly too: a peer on another host reached without RDMA (UCX's tcp), where
  // rendezvous copies as much and adds a round trip per message.
  bool large_eager = false;
  bool local_peer = false;  // the peer is a process of this host
};

class UcxConnection : public Connection {
 public:
  // `close_control` closes the TCP connection beside it off the loop thread (TcpConnection::Close
  // waits for its own loop, which never waits for this one).
  using ControlCloser = std::function<void(std::shared_ptr<Connection>, Status)>;
  UcxConnection(std::shared_ptr<UcxWorker> worker, Handler* handler, UcxConnectionOptions options, std::string peer,
                uint64_t token, ControlCloser close_control);
  ~UcxConnection() override;

  uint64_t id() const { return id_; }
  uint64_t token() const { return token_; }
  bool local_peer() const { return options_.local_peer; }
  void Attach(std::shared_ptr<Connection> control);  // before Start

  // --- On the loop thread -----------------------------------------------------------------
  void Bind(uint64_t id) { id_ = id; }
  // The endpoint to the peer and the peer's id for this connection: sends may go now.
  void Start(ucp_ep_h ep, uint64_t remote_id);
  void OnArrival(const Arrival& a);
  void OnEndpointError(ucs_status_t status);
  void CloseOnLoop(const Status& reason);

  // From the TCP connection's loop: it closed.
  void OnControlClosed(const Status& reason);

  Status Send(const protocol::Header& header, const std::vector<iovec>& payload, SendCallback on_done) override;
  void Cork() override;
  void Uncork() override;
  void Close(const Status& reason) override;
  bool closed() const override { return closed_.load(); }
  std::string peer_name() const override;
  void set_peer_name(std::string name) override;

 private:
  struct SendOp;
  struct Incoming;
  void ScheduleDrain();  // under no lock
  void Drain();          // loop thread: queued sends into UCX
  void StartSend(SendOp* op);
  void Finish(SendOp* op, ucs_status_t status);
  static void SendDone(void* request, ucs_status_t status, void* user);
  static void RecvDone(void* request, ucs_status_t status, size_t length, void* user);
  Status Receive(const Arrival& a, bool& fetching);  // fetching: the rendezvous descriptor was taken
  void DeliverReady();
  void Fail(const Status& reason);

  const std::shared_ptr<UcxWorker> worker_;
  Handler* const handler_;
  const UcxConnectionOptions options_;
  const uint64_t token_;
  const ControlCloser close_control_;
  uint64_t id_ = 0;
  std::shared_ptr<Connection> control_;

  // Loop thread only.
  ucp_ep_h ep_ = nullptr;
  uint64_t remote_id_ = 0;
  std::deque<std::shared_ptr<Incoming>> incoming_;  // in arrival order, delivered from the front
  size_t in_flight_ = 0;                            // sends UCX holds

  std::mutex mu_;
  std::vector<SendOp*> queue_;  // guarded by mu_
  bool drain_posted_ = false;   // guarded by mu_
  int corked_ = 0;              // guarded by mu_
  Status close_reason_;         // guarded by mu_
  std::atomic<bool> closed_{false};
  std::atomic<bool> close_done_{false};  // OnClose has returned

  mutable std::mutex name_mu_;
  std::string peer_;
};

}  // namespace byteps::transport::ucx
