#include "transport/transport.h"

namespace byteps::transport {

Status Connection::SendCopy(protocol::Header header, const std::string& payload) {
  auto owned = std::make_shared<std::string>(payload);
  header.payload_len = owned->size();
  std::vector<iovec> iov;
  if (!owned->empty()) iov.push_back({owned->data(), owned->size()});
  return Send(header, iov, [owned](const Status&) {});
}

}  // namespace byteps::transport
