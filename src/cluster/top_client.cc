#include "cluster/top_client.h"

#include <fmt/format.h>

#include <chrono>
#include <utility>

namespace byteps::cluster {

using protocol::Header;
using protocol::Opcode;

namespace {
constexpr uint64_t kMaxTopReply = 64u << 20;  // a summary per node; refuse anything absurd
}  // namespace

TopClient::TopClient(transport::Transport* transport, std::string host, int port)
    : transport_(transport), host_(std::move(host)), port_(port) {}

TopClient::~TopClient() {
  std::shared_ptr<transport::Connection> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = std::move(conn_);
  }
  if (c) c->Close(Aborted("byteps top closed"));
}

std::string TopClient::Where() const { return fmt::format("the scheduler at {}:{}", host_, port_); }

StatusOr<protocol::TopReply> TopClient::Ask(double timeout_s) {
  std::shared_ptr<transport::Connection> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = conn_;
  }
  if (!c || c->closed()) {
    auto opened = transport_->Connect(host_, port_, this, timeout_s);
    if (!opened.ok()) return Unavailable(fmt::format("cannot reach {}: {}", Where(), opened.status().message()));
    c = opened.value();
    c->set_peer_name(Where());
    std::lock_guard<std::mutex> lock(mu_);
    conn_ = c;
    closed_ = Status::Ok();
  }
  Header h;
  h.opcode = Opcode::kTopRequest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    h.request_id = ++asked_;
    reply_.reset();
  }
  if (Status st = c->SendCopy(h, ""); !st.ok()) return Unavailable(fmt::format("{}: {}", Where(), st.message()));
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                    [&] { return reply_.has_value() || conn_ != c; })) {
    return DeadlineExceeded(fmt::format("{} did not answer within {:g} s", Where(), timeout_s));
  }
  if (!reply_) return Unavailable(fmt::format("{} closed the connection: {}", Where(), closed_.message()));
  if (!reply_->ok()) return reply_->status().WithContext(Where());
  return std::move(*reply_);
}

StatusOr<transport::RecvBuffer> TopClient::OnHeader(transport::Connection& c, const Header& h) {
  if (h.opcode != Opcode::kTopReply || h.payload_len > kMaxTopReply) {
    return ProtocolError(fmt::format("{} sent {} ({} bytes) to byteps top", c.peer_name(),
                                     protocol::OpcodeName(h.opcode), h.payload_len));
  }
  return transport::RecvBuffer{};
}

void TopClient::OnFrame(transport::Connection&, const Header& h, transport::RecvBuffer b) {
  auto reply = protocol::DecodeTopReply(std::string(reinterpret_cast<const char*>(b.data), b.size));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (h.request_id != asked_ || reply_) return;  // an answer given up on
    reply_ = std::move(reply);
  }
  cv_.notify_all();
}

void TopClient::OnClose(transport::Connection& c, const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (conn_.get() != &c) return;
    conn_.reset();
    closed_ = reason;
  }
  cv_.notify_all();
}

}  // namespace byteps::cluster
