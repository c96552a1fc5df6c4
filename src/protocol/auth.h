// Connection authentication with the job secret (BYTEPS_JOB_SECRET). Both ends of a connection
// send AuthChallenge(nonce) first and answer the peer's challenge with AuthResponse(proof), where
//   proof = HMAC-SHA256(secret, "byteps-auth-v1" || role || challenge_answered || own_challenge)
// and role is 'C' for the connecting side, 'A' for the accepting side (so a proof can never be
// reflected back to its sender). Nothing else is accepted from a peer before its proof verifies.
// Documented in docs/wire-format.md. Threading: pure functions (RAND_bytes is thread-safe).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace byteps::protocol {

inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthProofBytes = 32;
using AuthNonce = std::array<uint8_t, kAuthNonceBytes>;
using AuthProof = std::array<uint8_t, kAuthProofBytes>;

enum class AuthRole : char { kConnector = 'C', kAcceptor = 'A' };

// Cryptographically random nonce (OpenSSL RAND_bytes).
StatusOr<AuthNonce> NewAuthNonce();

// The proof `role` sends in answer to `challenge`, having sent `own` itself.
AuthProof MakeAuthProof(const std::string& secret, AuthRole role, const AuthNonce& challenge,
                        const AuthNonce& own);

// Constant-time comparison of a received proof with the expected one.
bool AuthProofMatches(const AuthProof& expected, const uint8_t* received, size_t len);

}  // namespace byteps::protocol
