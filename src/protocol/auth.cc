#include "protocol/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <string_view>
#include <vector>

namespace byteps::protocol {

StatusOr<AuthNonce> NewAuthNonce() {
  AuthNonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    return Internal("OpenSSL RAND_bytes failed: no randomness for the authentication challenge");
  }
  return n;
}

AuthProof MakeAuthProof(const std::string& secret, AuthRole role, const AuthNonce& challenge,
                        const AuthNonce& own) {
  constexpr std::string_view kLabel = "byteps-auth-v1";
  std::vector<uint8_t> msg(kLabel.begin(), kLabel.end());
  msg.push_back(static_cast<uint8_t>(role));
  msg.insert(msg.end(), challenge.begin(), challenge.end());
  msg.insert(msg.end(), own.begin(), own.end());
  AuthProof out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(), out.data(),
       &len);
  return out;
}

bool AuthProofMatches(const AuthProof& expected, const uint8_t* received, size_t len) {
  return len == expected.size() && CRYPTO_memcmp(expected.data(), received, len) == 0;
}

}  // namespace byteps::protocol
