// A connection between two processes of one host through shared memory (shm_ring.h): frames go
// into a ring in a segment both map, with no socket on the data path. A small payload is copied
// into the ring; a large one stays in the sender's memory and the receiver copies it straight into
// the destination its Handler chose (process_vm_readv: one copy per direction), after which the
// sender's on_done runs. A Unix-socket connection of the TCP backend (authenticated like any other,
// BYTEPS_JOB_SECRET) carries the handshake and the bells: a one-header frame that wakes the other
// side when it sleeps, so an idle connection costs nothing and a busy one no system call per frame.
// That socket also tells when the peer dies (kill -9 included): the connection closes with the
// reason, and every pending send completes with it.
// Threading: Send/Close from any thread (one send lock); the receive side and every Handler
// callback run on the control connection's I/O thread, never concurrently for one connection.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/shm/shm_ring.h"
#include "transport/transport.h"

namespace byteps::transport::shm {

inline constexpr size_t kInlineMax = 64 * 1024;  // payloads up to this are copied into the ring
inline constexpr uint32_t kBellData = 1, kBellSpace = 2;

struct ShmConnectionOptions {
  uint64_t max_payload = 1ull << 30;
  bool checksum = false;
};

class ShmConnection : public Connection {
 public:
  // `acceptor`: this end accepted (it sends on direction 1). `peer_pid`: whose memory remote
  // payloads are read from.
  ShmConnection(std::shared_ptr<Segment> segment, bool acceptor, int peer_pid, Handler* handler,
                ShmConnectionOptions options, std::string peer);
  ~ShmConnection() override;

  // The Unix-socket connection that carries bells; set once, before any bell.
  void Attach(std::shared_ptr<Connection> control);
  // From the control connection's I/O thread: a bell, or its close.
  void OnBell(uint32_t what);
  void OnControlClosed(const Status& reason);

  Status Send(const protocol::Header& header, const std::vector<iovec>& payload, SendCallback on_done) override;
  // Between Cork and Uncork sends are only queued; Uncork moves them into the ring with one bell.
  void Cork() override;
  void Uncork() override;
  void Close(const Status& reason) override;
  bool closed() const override { return closed_.load(); }
  std::string peer_name() const override;
  void set_peer_name(std::string name) override;

 private:
  struct Outgoing {
    uint8_t header[protocol::kHeaderSize];
    std::vector<iovec> iov;
    size_t bytes = 0;
    uint32_t crc = 0;
    bool remote = false;
    uint64_t seq = 0;
    SendCallback on_done;
  };
  // Under send_mu_: puts `o` into the ring; false when it has no room now.
  bool WriteLocked(Outgoing& o);
  // Completes acknowledged remote sends and moves queued ones into the ring; asks for a bell while
  // some remain. Runs the finished sends' callbacks outside the lock.
  void Progress();
  void Drain();                                // the receive side
  Status DeliverOne(const RecordView& rec);    // one frame to the Handler
  void Bell(uint32_t what);
  void Fail(const Status& reason);             // closes (from the I/O thread)

  std::shared_ptr<Segment> segment_;
  Ring tx_, rx_;
  const int peer_pid_;
  Handler* const handler_;
  const ShmConnectionOptions options_;
  std::shared_ptr<Connection> control_;

  std::mutex send_mu_;
  std::deque<Outgoing> queued_;     // not in the ring yet (no room); guarded by send_mu_
  std::deque<Outgoing> in_flight_;  // remote payloads published, not yet read; guarded by send_mu_
  uint64_t next_seq_ = 0;           // guarded by send_mu_
  int corked_ = 0;                  // guarded by send_mu_
  Status close_reason_;             // guarded by send_mu_
  std::atomic<bool> closed_{false};
  std::atomic<bool> close_done_{false};

  mutable std::mutex name_mu_;
  std::string peer_;
};

}  // namespace byteps::transport::shm
