// TcpConnection's authentication handshake (protocol/auth.h): the challenge each side sends, the
// proof it answers with, what may arrive before the peer proved itself, and waiting for that.
// Framed I/O is in connection.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "transport/tcp/connection.h"

namespace byteps::transport::tcp {
namespace {

// Largest payload accepted before the peer authenticated (the auth frames are 32 bytes).
constexpr uint64_t kPreAuthMaxPayload = 64;

}  // namespace

bool TcpConnection::IsAuthOpcode(protocol::Opcode op) {
  return op == protocol::Opcode::kAuthChallenge || op == protocol::Opcode::kAuthResponse;
}

bool TcpConnection::SendChallenge() {
  auto nonce = protocol::NewAuthNonce();
  if (!nonce.ok()) {
    BYTEPS_LOG(Error, "connection to {}: {}", peer_name(), nonce.status().message());
    return false;
  }
  own_nonce_ = nonce.value();
  protocol::Header h;
  h.opcode = protocol::Opcode::kAuthChallenge;
  h.payload_len = own_nonce_.size();
  std::string nonce_bytes(reinterpret_cast<const char*>(own_nonce_.data()), own_nonce_.size());
  return SendCopy(h, nonce_bytes).ok();
}

Status TcpConnection::WaitAuthenticated(double timeout_s) {
  std::unique_lock<std::mutex> lock(auth_mu_);
  bool done = auth_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                [&] { return authenticated_.load() || closed_.load(); });
  if (authenticated_.load()) return Status::Ok();
  if (!done) {
    return DeadlineExceeded(fmt::format("{} did not complete authentication within {:.1f} s", peer_name(),
                                        timeout_s));
  }
  Status reason;
  {
    std::lock_guard<std::mutex> send_lock(send_mu_);
    reason = close_reason_;
  }
  if (IsRefusal(reason)) return reason;  // says what was wrong itself
  // A peer that rejects our proof hangs up right after it arrives; a close before our proof went
  // out is the network's doing.
  return Status(reason.code(), reason.message() + (peer_challenged_.load()
                                                       ? " (after this process sent its proof: does the peer use the "
                                                         "same BYTEPS_JOB_SECRET?)"
                                                       : " (before the handshake got that far: a network problem, not "
                                                         "the secret)"));
}

Status TcpConnection::CheckSizeBeforeAuth(const protocol::Header& h) const {
  if (authenticated_.load()) return Status::Ok();
  // A frame of the layers above before the handshake says more than its size does.
  if (!options_.secret.empty() && !IsAuthOpcode(h.opcode)) return CheckBeforeAuth(h);
  if (h.payload_len <= kPreAuthMaxPayload) return Status::Ok();
  return ProtocolError(fmt::format("frame from {}: {} with a payload of {} bytes before the connection is "
                                   "authenticated (at most {} bytes are accepted before that)",
                                   peer_name(), protocol::OpcodeName(h.opcode), h.payload_len, kPreAuthMaxPayload));
}

Status TcpConnection::CheckBeforeAuth(const protocol::Header& h) const {
  const bool auth_frame = IsAuthOpcode(h.opcode);
  if (options_.secret.empty()) {
    // Only reached for authentication frames: the peer has a secret, we do not.
    // A setting that differs from the job's: no retry can fix it (InvalidArgument, not a
    // ProtocolError, which a damaged frame also raises).
    return InvalidArgument(fmt::format("{} requires authentication, but BYTEPS_JOB_SECRET is not set here (give "
                                       "every process of the job the same secret)",
                                       peer_name()));
  }
  if (!auth_frame) {
    return ProtocolError(fmt::format("{} sent {} before authenticating: it has no BYTEPS_JOB_SECRET or a "
                                     "different one",
                                     peer_name(), protocol::OpcodeName(h.opcode)));
  }
  if (authenticated_.load()) {
    return ProtocolError(fmt::format("unexpected {} from {}: the connection is already authenticated",
                                     protocol::OpcodeName(h.opcode), peer_name()));
  }
  if (h.opcode == protocol::Opcode::kAuthChallenge && peer_challenged_) {
    return ProtocolError(fmt::format("{} sent a second AuthChallenge", peer_name()));
  }
  if (h.opcode == protocol::Opcode::kAuthResponse && !peer_challenged_) {
    return ProtocolError(fmt::format("{} sent AuthResponse before its AuthChallenge", peer_name()));
  }
  const uint64_t want = h.opcode == protocol::Opcode::kAuthChallenge ? protocol::kAuthNonceBytes
                                                                      : protocol::kAuthProofBytes;
  if (h.payload_len != want) {
    return ProtocolError(fmt::format("{} from {} has {} bytes (expected {})", protocol::OpcodeName(h.opcode),
                                     peer_name(), h.payload_len, want));
  }
  return Status::Ok();
}

Status TcpConnection::HandleAuthFrame(const uint8_t* payload, size_t len) {
  using protocol::AuthRole;
  const AuthRole mine = options_.accepted ? AuthRole::kAcceptor : AuthRole::kConnector;
  const AuthRole theirs = options_.accepted ? AuthRole::kConnector : AuthRole::kAcceptor;
  if (cur_.opcode == protocol::Opcode::kAuthChallenge) {
    std::memcpy(peer_nonce_.data(), payload, std::min(len, peer_nonce_.size()));
    peer_challenged_ = true;
    protocol::AuthProof proof = protocol::MakeAuthProof(options_.secret, mine, peer_nonce_, own_nonce_);
    protocol::Header h;
    h.opcode = protocol::Opcode::kAuthResponse;
    h.payload_len = proof.size();
    return SendCopy(h, std::string(reinterpret_cast<const char*>(proof.data()), proof.size()));
  }
  protocol::AuthProof expected = protocol::MakeAuthProof(options_.secret, theirs, own_nonce_, peer_nonce_);
  if (!protocol::AuthProofMatches(expected, payload, len)) {
    return ProtocolError(fmt::format("{} failed authentication: its proof does not match this job's "
                                     "BYTEPS_JOB_SECRET",
                                     peer_name()));
  }
  {
    std::lock_guard<std::mutex> lock(auth_mu_);
    authenticated_ = true;
  }
  auth_cv_.notify_all();
  BYTEPS_LOG(Debug, "{} authenticated", peer_name());
  return Status::Ok();
}

}  // namespace byteps::transport::tcp
