// A TCP connection: non-blocking socket owned by one EventLoop. Sends go out with sendmsg straight
// from the caller's iovecs (header bytes are copied into the queue entry); receives land in a
// staging buffer for headers and small payloads, and straight into the destination buffer for
// large ones.
// With a secret the connection first authenticates (protocol/auth.h; connection_auth.cc): frames
// reach the Handler only after the peer's proof verified. With checksums every frame carries CRC-32C (frame.h).
// Threading: Send/Close from any thread (a mutex guards the send queue and the socket's write
// side); reads and handler callbacks run on the loop thread only.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "protocol/auth.h"
#include "transport/tcp/event_loop.h"
#include "transport/transport.h"

namespace byteps::transport::tcp {

struct ConnectionOptions {
  uint64_t max_payload = 1ull << 30;
  std::string secret;     // empty: no authentication
  bool checksum = false;
  bool accepted = false;  // we accepted it (the authentication role 'A'), else we connected ('C')
};

class TcpConnection : public Connection {
 public:
  TcpConnection(int fd, EventLoop* loop, Handler* handler, ConnectionOptions options, std::string peer);
  ~TcpConnection() override;

  // Registers with the loop and sends the authentication challenge; call once after
  // construction (needs shared_from_this).
  bool Start();
  // Waits until the peer authenticated (OK), the connection closed (its reason, with a hint
  // whether a different secret is likely) or timeout_s.
  Status WaitAuthenticated(double timeout_s);
  bool authenticated() const { return authenticated_.load(); }
  // True once a frame reached the Handler (used to drop silent connections without a secret).
  bool delivered_frame() const { return delivered_.load(); }
  bool accepted() const { return options_.accepted; }
  std::chrono::steady_clock::time_point created() const { return created_; }

  Status Send(const protocol::Header& header, const std::vector<iovec>& payload,
              SendCallback on_done) override;
  void Cork() override;
  void Uncork() override;
  void Close(const Status& reason) override;
  bool closed() const override { return closed_.load(); }
  std::string peer_name() const override;
  void set_peer_name(std::string name) override;

 private:
  struct SendEntry {
    uint8_t header[protocol::kHeaderSize];
    uint8_t trailer[protocol::kTrailerSize];  // payload CRC-32C when checksummed
    std::vector<iovec> iov;  // iov[0] = header
    size_t remaining = 0;    // bytes not yet written
    SendCallback on_done;
  };

  void OnEvents(uint32_t events);
  // Unless the I/O thread already waits for the socket to drain (then it writes), writes what is
  // queued and arms EPOLLOUT for the rest. Caller holds send_mu_.
  Status WriteNowLocked(std::vector<SendCallback>* done);
  // Runs the finished sends' callbacks, and closes the connection (on its loop) after a write error.
  Status AfterWrite(const std::vector<SendCallback>& done, const Status& err);
  // Writes queued entries until done or EAGAIN. Caller holds send_mu_. Moves finished
  // callbacks to *done. Returns an error on a socket failure.
  Status FlushLocked(std::vector<SendCallback>* done);
  void HandleWritable();
  Status HandleReadable();
  Status ParseStaged();
  Status OnFrameHeader();       // cur_ decoded: choose where its payload goes
  void AnswerOtherVersion();    // an accepted peer speaks another wire version: tell it ours
  Status PayloadComplete();     // all of cur_'s payload is in: verify the trailer or deliver
  Status DeliverFrame();
  // Authentication (connection_auth.cc): our challenge, what may arrive before the peer proved
  // itself (kinds, then sizes: checked before anything is allocated), and its frames.
  static bool IsAuthOpcode(protocol::Opcode op);
  bool SendChallenge();
  Status CheckBeforeAuth(const protocol::Header& h) const;
  Status CheckSizeBeforeAuth(const protocol::Header& h) const;
  Status HandleAuthFrame(const uint8_t* payload, size_t len);
  void CloseOnLoop(const Status& reason);
  std::shared_ptr<TcpConnection> self() {
    return std::static_pointer_cast<TcpConnection>(shared_from_this());
  }

  const int fd_;
  EventLoop* const loop_;
  Handler* const handler_;
  const ConnectionOptions options_;
  const std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();

  // Authentication. own_nonce_ is set before Start registers the socket; the rest is loop-only
  // except authenticated_ (and auth_mu_/auth_cv_ for WaitAuthenticated).
  protocol::AuthNonce own_nonce_{};
  protocol::AuthNonce peer_nonce_{};
  std::atomic<bool> peer_challenged_{false};  // its challenge arrived (and our proof went out)
  std::atomic<bool> authenticated_{false};
  std::atomic<bool> delivered_{false};
  std::mutex auth_mu_;
  std::condition_variable auth_cv_;

  mutable std::mutex name_mu_;
  std::string peer_;  // guarded by name_mu_

  std::mutex send_mu_;
  std::deque<SendEntry> send_queue_;  // guarded by send_mu_
  int corked_ = 0;                    // Cork depth: Send only queues; guarded by send_mu_
  bool want_write_ = false;           // EPOLLOUT armed; guarded by send_mu_
  std::atomic<bool> closed_{false};
  std::atomic<bool> close_done_{false};  // OnClose and the pending sends' callbacks have run
  Status close_reason_;               // guarded by send_mu_

  // Read state (loop thread only).
  std::vector<uint8_t> stage_;
  size_t stage_begin_ = 0, stage_end_ = 0;
  bool in_payload_ = false;
  bool in_trailer_ = false;     // waiting for cur_'s checksum trailer
  bool internal_frame_ = false; // cur_ is an authentication frame (not for the Handler)
  uint32_t crc_ = 0;            // running CRC-32C of cur_'s payload
  protocol::Header cur_;
  RecvBuffer target_;
  size_t got_ = 0;
};

}  // namespace byteps::transport::tcp
