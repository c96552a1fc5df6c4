// The UCX backend of a build without UCX (pkg-config found no ucx): asking for it is an error
// that names the missing library and the way out.
#include <fmt/format.h>

#include "transport/ucx/ucx_transport.h"

namespace byteps::transport::ucx {
namespace {

Status NotBuilt() {
  return Unavailable(
      "BYTEPS_TRANSPORT=ucx (or DMLC_ENABLE_RDMA / DMLC_ENABLE_UCX) asks for the UCX transport, but this byteps was "
      "built without UCX (libucx-dev / pkg-config ucx was not found at build time): install libucx-dev and rebuild, "
      "or set BYTEPS_TRANSPORT=tcp");
}

class MissingUcxTransport final : public Transport {
 public:
  StatusOr<int> Listen(const std::string&, int, Handler*) override { return NotBuilt(); }
  StatusOr<std::shared_ptr<Connection>> Connect(const std::string&, int, Handler*, double) override {
    return NotBuilt();
  }
  StatusOr<int> ListenLocal(const std::string&, Handler*) override { return NotBuilt(); }
  StatusOr<std::shared_ptr<Connection>> ConnectLocal(const std::string&, Handler*, double) override {
    return NotBuilt();
  }
  void Shutdown() override {}
};

}  // namespace

std::unique_ptr<Transport> CreateUcxTransport(const TransportOptions&) {
  return std::make_unique<MissingUcxTransport>();
}
bool UcxBuilt() { return false; }

}  // namespace byteps::transport::ucx
