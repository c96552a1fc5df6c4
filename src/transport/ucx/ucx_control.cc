#include "transport/ucx/ucx_control.h"

#include <cstring>

namespace byteps::transport::ucx {
namespace {

uint64_t Load64(const std::string& s, size_t at) {
  uint64_t v;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}

void Append64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }

}  // namespace

std::string EncodeOffer(const UcxOffer& offer) {
  std::string out;
  Append64(out, offer.conn_id);
  Append64(out, offer.token);
  return out + offer.address;
}

std::optional<UcxOffer> ParseOffer(const std::string& payload) {
  if (payload.size() <= 16) return std::nullopt;
  return UcxOffer{Load64(payload, 0), Load64(payload, 8), payload.substr(16)};
}

std::string EncodeAnswer(const UcxAnswer& answer) {
  std::string out;
  Append64(out, answer.conn_id);
  return out + answer.address;
}

std::optional<UcxAnswer> ParseAnswer(const std::string& payload) {
  if (payload.size() <= 8) return std::nullopt;
  return UcxAnswer{Load64(payload, 0), payload.substr(8)};
}

ControlReaper::ControlReaper() : thread_([this] { Run(); }) {}

ControlReaper::~ControlReaper() { Stop(); }

void ControlReaper::Close(std::shared_ptr<Connection> c, Status reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) {
      queue_.emplace_back(std::move(c), std::move(reason));
      cv_.notify_one();
      return;
    }
  }
  c->Close(reason);
}

void ControlReaper::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void ControlReaper::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopped_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto [c, reason] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    c->Close(reason);
    c.reset();
    lock.lock();
  }
}

}  // namespace byteps::transport::ucx
