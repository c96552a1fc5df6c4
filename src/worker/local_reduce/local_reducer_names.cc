// LocalReducer as a host's name service in a job without servers (LocalOptions::names): the
// non-roots ask the root over the local socket, as a distributed job's processes ask the scheduler.
#include <fmt/format.h>

#include <chrono>

#include "protocol/control.h"
#include "worker/local_reduce/local_reducer.h"

namespace byteps::worker::local_reduce {

using protocol::Header;
using protocol::Opcode;

void LocalReducer::OnNameRequest(transport::Connection& c, const Header& h, const std::string& payload) {
  protocol::NameReply reply;
  auto req = protocol::DecodeNameRequest(payload);
  StatusOr<protocol::NamePlan> plan =
      !req.ok()          ? StatusOr<protocol::NamePlan>(req.status())
      : options_.names   ? options_.names(*req)
                         : StatusOr<protocol::NamePlan>(Precondition(
                               "the local root plans no names (a job with servers: ask the scheduler)"));
  if (plan.ok()) {
    reply.plan = std::move(plan.value());
  } else {
    reply.error = plan.status().message();
    reply.error_code = static_cast<uint64_t>(plan.status().code());
  }
  Header r;
  r.opcode = Opcode::kNameReply;
  r.request_id = h.request_id;
  (void)c.SendCopy(r, protocol::Encode(reply));
}

void LocalReducer::OnNameReply(const Header& h, const std::string& payload) {
  auto reply = protocol::DecodeNameReply(payload);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = name_replies_.find(h.request_id);
    if (it == name_replies_.end()) return;
    if (reply.ok()) {
      it->second = std::move(reply.value());
    } else {
      protocol::NameReply bad;
      bad.error = reply.status().message();
      bad.error_code = static_cast<uint64_t>(reply.status().code());
      it->second = std::move(bad);
    }
  }
  cv_.notify_all();
}

StatusOr<protocol::NamePlan> LocalReducer::ResolveAtRoot(const protocol::NameRequest& r, double timeout_s) {
  const std::string what = fmt::format("the local root's plan of tensor '{}' (incarnation {}, generation {})", r.name,
                                       r.incarnation, r.generation);
  std::shared_ptr<transport::Connection> root;
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_.WithContext(what);
    root = root_;
    id = next_name_request_++;
    name_replies_[id];
  }
  Header h;
  h.opcode = Opcode::kNameRequest;
  h.request_id = id;
  Status sent = root ? root->SendCopy(h, protocol::Encode(r)) : Unavailable("no connection to the local root");
  std::unique_lock<std::mutex> lock(mu_);
  if (sent.ok()) {
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                 [&] { return name_replies_[id].has_value() || !failure_.ok(); });
  }
  std::optional<protocol::NameReply> reply = std::move(name_replies_[id]);
  name_replies_.erase(id);
  if (!sent.ok()) return sent.WithContext(what);
  if (!reply) {
    if (!failure_.ok()) return failure_.WithContext(what);
    return DeadlineExceeded(fmt::format("{}: no answer within BYTEPS_TIMEOUT={} s", what, timeout_s));
  }
  if (reply->error.empty()) return std::move(reply->plan);
  const auto code = static_cast<StatusCode>(reply->error_code);
  return Status(code == StatusCode::kOk ? StatusCode::kInternal : code, reply->error).WithContext(what);
}

}  // namespace byteps::worker::local_reduce
