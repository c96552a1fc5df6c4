// The UCX backend of transport.h (ucx_connection.h), over UCP: RDMA (verbs, RoCE) on a real
// cluster, UCX's tcp and sm transports here; UCX_TLS and the other UCX_* variables choose, as
// UCX documents. A listener is a TCP listener of the TCP backend on the same port: a connection
// starts there (authenticated with BYTEPS_JOB_SECRET like any TCP connection), the two sides swap
// UCP worker addresses, connection ids and a token in UcxHello / UcxReady, and from then on the
// frames travel through UCX while the TCP connection only watches for the peer's death. A peer
// that speaks plain TCP to such a listener (BYTEPS_TRANSPORT=tcp or auto there) is served over
// TCP, so peers of different settings still meet; a UCX connector whose peer does not speak UCX
// fails with an error that says so.
// Threading: as transport.h.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace byteps::transport::ucx {

// Without UCX at build time (no libucx-dev) the transport it returns fails Listen and Connect
// with an error naming the missing library and BYTEPS_TRANSPORT=tcp.
std::unique_ptr<Transport> CreateUcxTransport(const TransportOptions& options);
bool UcxBuilt();

}  // namespace byteps::transport::ucx
