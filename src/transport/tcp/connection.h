// A TCP connection: non-blocking socket owned by one EventLoop. Sends go out with sendmsg straight
// from the caller's iovecs (header bytes are copied into the queue entry); receives land in a
// staging buffer for headers and small payloads, and straight into the destination buffer for
// large ones.
// Threading: Send/Close from any thread (a mutex guards the send queue and the socket's write
// side); reads and handler callbacks run on the loop thread only.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/tcp/event_loop.h"
#include "transport/transport.h"

namespace byteps::transport::tcp {

class TcpConnection : public Connection {
 public:
  TcpConnection(int fd, EventLoop* loop, Handler* handler, uint64_t max_payload, std::string peer);
  ~TcpConnection() override;

  // Registers with the loop; call once after construction (needs shared_from_this).
  bool Start();

  Status Send(const protocol::Header& header, const std::vector<iovec>& payload,
              SendCallback on_done) override;
  void Close(const Status& reason) override;
  bool closed() const override { return closed_.load(); }
  std::string peer_name() const override;
  void set_peer_name(std::string name) override;

 private:
  struct SendEntry {
    uint8_t header[protocol::kHeaderSize];
    std::vector<iovec> iov;  // iov[0] = header
    size_t remaining = 0;    // bytes not yet written
    SendCallback on_done;
  };

  void OnEvents(uint32_t events);
  // Writes queued entries until done or EAGAIN. Caller holds send_mu_. Moves finished
  // callbacks to *done. Returns an error on a socket failure.
  Status FlushLocked(std::vector<SendCallback>* done);
  void HandleWritable();
  Status HandleReadable();
  Status ParseStaged();
  Status DeliverFrame();
  void CloseOnLoop(const Status& reason);
  std::shared_ptr<TcpConnection> self() {
    return std::static_pointer_cast<TcpConnection>(shared_from_this());
  }

  const int fd_;
  EventLoop* const loop_;
  Handler* const handler_;
  const uint64_t max_payload_;

  mutable std::mutex name_mu_;
  std::string peer_;  // guarded by name_mu_

  std::mutex send_mu_;
  std::deque<SendEntry> send_queue_;  // guarded by send_mu_
  bool want_write_ = false;           // EPOLLOUT armed; guarded by send_mu_
  std::atomic<bool> closed_{false};
  Status close_reason_;               // guarded by send_mu_

  // Read state (loop thread only).
  std::vector<uint8_t> stage_;
  size_t stage_begin_ = 0, stage_end_ = 0;
  bool in_payload_ = false;
  protocol::Header cur_;
  RecvBuffer target_;
  std::shared_ptr<std::vector<uint8_t>> owned_;  // transport-allocated payload
  size_t got_ = 0;
};

}  // namespace byteps::transport::tcp
