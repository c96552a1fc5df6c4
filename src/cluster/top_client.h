// `byteps top`'s line to the scheduler: Ask sends a TopRequest and waits for the TopReply (every
// node of the job and its last heartbeat summaries, protocol/control.h). The connection is opened
// on the first Ask, kept for the next, and opened again after it dropped. Nothing is registered:
// the scheduler answers any connection (which BYTEPS_JOB_SECRET authenticates like every other).
// Threading: one caller at a time; handler callbacks run on the transport's I/O threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/status.h"
#include "protocol/control.h"
#include "transport/transport.h"

namespace byteps::cluster {

class TopClient : public transport::Handler {
 public:
  // `transport` is borrowed and must outlive the client.
  TopClient(transport::Transport* transport, std::string host, int port);
  ~TopClient() override;

  // The scheduler's answer within timeout_s. Errors name the scheduler's address: Unavailable
  // (cannot connect, or the connection dropped), DeadlineExceeded (no answer in time),
  // ProtocolError (an answer that does not decode).
  StatusOr<protocol::TopReply> Ask(double timeout_s);

  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection& c, const protocol::Header& h) override;
  void OnFrame(transport::Connection& c, const protocol::Header& h, transport::RecvBuffer b) override;
  void OnClose(transport::Connection& c, const Status& reason) override;

 private:
  std::string Where() const;

  transport::Transport* const transport_;
  const std::string host_;
  const int port_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<transport::Connection> conn_;       // guarded by mu_
  uint64_t asked_ = 0;                                // the request waited for; guarded by mu_
  std::optional<StatusOr<protocol::TopReply>> reply_;  // its answer; guarded by mu_
  Status closed_;                                     // why conn_ closed; guarded by mu_
};

}  // namespace byteps::cluster
