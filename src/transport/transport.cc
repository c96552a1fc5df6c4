#include "transport/transport.h"

#include <fmt/format.h>

namespace byteps::transport {

Status Connection::SendCopy(protocol::Header header, const std::string& payload) {
  auto owned = std::make_shared<std::string>(payload);
  header.payload_len = owned->size();
  std::vector<iovec> iov;
  if (!owned->empty()) iov.push_back({owned->data(), owned->size()});
  return Send(header, iov, [owned](const Status&) {});
}

Status PrepareRecvBuffer(RecvBuffer& b, const protocol::Header& header, size_t len, const std::string& peer) {
  if (!b.discard && b.data == nullptr && len > 0) {
    auto owned = std::make_shared<std::vector<uint8_t>>(len);
    b.data = owned->data();
    b.size = len;
    b.owner = std::move(owned);
  }
  if (!b.discard && b.size != len) {
    return Internal(fmt::format("{} from {}: handler gave a {}-byte buffer for {} bytes",
                                protocol::DescribeHeader(header), peer, b.size, len));
  }
  return Status::Ok();
}

}  // namespace byteps::transport
