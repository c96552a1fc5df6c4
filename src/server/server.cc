#include "server/server.h"

#include <fmt/format.h>

#include "common/logging.h"
#include "protocol/key_layout.h"
#include "server/buffer_pool.h"
#include "server/server_trace.h"
#include "server/sum_engine.h"

namespace byteps::server {

namespace {
// A data connection's tag: the worker's rank (low 32 bits) and which of its connections to this
// server it is (the Hello's request_id; a reconnect's is higher).
int64_t TagOf(uint32_t worker, uint64_t generation) {
  return static_cast<int64_t>(((generation & 0x7fffffffULL) << 32) | worker);
}
int WorkerOf(int64_t tag) { return static_cast<int>(tag & 0xffffffff); }
uint64_t GenerationOf(int64_t tag) { return static_cast<uint64_t>(tag) >> 32; }
}  // namespace

using protocol::Header;
using protocol::Opcode;

Server::Server(const ServerOptions& options) : options_(options), pool_(std::make_unique<BufferPool>()) {
  int n = std::max(1, options_.engine_threads);
  board_ = std::make_unique<JoinBoard>(options_.num_workers);
  if (options_.trace_on) {
    trace_ = std::make_unique<ServerTrace>(options_.trace_dir,
                                           TraceWindow{options_.trace_start_step, options_.trace_end_step});
  }
  for (int i = 0; i < n; ++i) {
    shards_.push_back(std::make_unique<SumEngine>(i, options_.num_workers, board_.get(),
                                                  trace_ ? trace_->NewBuffer() : nullptr));
  }
  board_->set_notify([this] {
    for (auto& shard : shards_) shard->Post(JoinTask{});
  });
  transport_ = transport::CreateTransport(options_.transport);
}

Server::~Server() { Shutdown(); }

void Server::Shutdown() {
  if (transport_) transport_->Shutdown();
  if (!shards_.empty() && keys_freed() > 0) {
    BYTEPS_LOG(Info, "{} keys held at the end; {} freed once every worker released them", keys_held(), keys_freed());
  }
  if (!shards_.empty()) BYTEPS_LOG(Info, "took {} bytes of pushes", pushed_bytes());
  if (board_) board_->Close();  // a join drained below reaches no shard being destroyed
  shards_.clear();              // joins after draining; buffers return to pool_
  transport_.reset();
}

StatusOr<int> Server::Listen(const std::string& host, int port) {
  auto p = transport_->Listen(host, port, this);
  return p;  // an error names the address; the caller names the role (byteps server: ...)
}

std::string Server::OpenRounds(double timeout_s) {
  std::string out;
  for (auto& shard : shards_) {
    auto rounds = shard->OpenRounds(timeout_s);
    out += rounds.ok() ? rounds.value() : fmt::format("  ({})\n", rounds.status().message());
  }
  return out.empty() ? "  (none)\n" : out;
}

StatusOr<std::string> Server::WriteTrace(int rank, const std::string& job, int64_t clock_offset_us) {
  if (!trace_) return std::string();
  Shutdown();  // the shards must have stopped writing into their buffers
  return trace_->Write(TraceIdentity{rank, job, clock_offset_us});
}

size_t Server::keys_held() const {
  size_t n = 0;
  for (const auto& s : shards_) n += s->keys_held();
  return n;
}

uint64_t Server::pushed_bytes() const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s->pushed_bytes();
  return n;
}

size_t Server::keys_freed() const {
  size_t n = 0;
  for (const auto& s : shards_) n += s->keys_freed();
  return n;
}

SumEngine& Server::ShardFor(uint64_t key) {
  return *shards_[protocol::PlaceKey(key, shards_.size())];
}

StatusOr<transport::RecvBuffer> Server::OnHeader(transport::Connection& c, const Header& h) {
  if (h.opcode == Opcode::kHello || h.opcode == Opcode::kInitKey) {
    if (h.payload_len > 64 * 1024) {
      return ProtocolError(fmt::format("{} frame of {} bytes from {} is too large", protocol::OpcodeName(h.opcode),
                                       h.payload_len, c.peer_name()));
    }
    return transport::RecvBuffer{};
  }
  if (c.tag < 0) {
    return ProtocolError(fmt::format("{} sent {} before Hello; not a byteps worker", c.peer_name(),
                                     protocol::OpcodeName(h.opcode)));
  }
  if (h.opcode == Opcode::kLeave || h.opcode == Opcode::kRelease) {
    if (h.payload_len != 0) {
      return ProtocolError(fmt::format("{} from {} with a payload", protocol::OpcodeName(h.opcode), c.peer_name()));
    }
    return transport::RecvBuffer{};
  }
  if (h.opcode != Opcode::kPushPull) {
    return ProtocolError(fmt::format("unexpected {} from {}", protocol::OpcodeName(h.opcode), c.peer_name()));
  }
  transport::RecvBuffer b;
  auto buf = pool_->Get(h.payload_len);
  if (!buf.ok()) {
    // That request fails, not the connection or the server: its payload is read and dropped, and
    // OnFrame hands the failure to the key's shard, which answers with an Error naming the tensor.
    BYTEPS_LOG(Error, "{} from {}: {}", protocol::DescribeHeader(h), c.peer_name(), buf.status().message());
    b.discard = true;
    return b;
  }
  b.size = h.payload_len;
  b.data = buf->get();
  b.owner = std::move(buf.value());
  return b;
}

void Server::OnFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) {
  switch (h.opcode) {
    case Opcode::kHello: {
      if (h.sender >= static_cast<uint32_t>(options_.num_workers)) {
        BYTEPS_LOG(Error, "refusing {}: worker rank {} is out of range for {} workers", c.peer_name(), h.sender,
                   options_.num_workers);
        c.Close(ProtocolError("worker rank out of range"));
        return;
      }
      c.tag = TagOf(h.sender, h.request_id);  // request_id: which of its connections this is
      c.set_peer_name(fmt::format("worker {} ({})", h.sender, c.peer_name()));
      return;
    }
    case Opcode::kInitKey: {
      if (c.tag < 0) {
        c.Close(ProtocolError("InitKey before Hello"));
        return;
      }
      std::string payload(reinterpret_cast<const char*>(b.data), b.size);
      auto init = protocol::DecodeKeyInit(payload);
      if (!init.ok() || !DataTypeFromCode(init->dtype) || init->bytes % DataTypeSize(*DataTypeFromCode(init->dtype))) {
        std::string why = !init.ok() ? init.status().message()
                          : !DataTypeFromCode(init->dtype)
                              ? fmt::format("tensor '{}' key {}: unknown dtype code {}", init->name, h.key, init->dtype)
                              : fmt::format("tensor '{}' key {}: {} bytes is not a whole number of {} elements",
                                            init->name, h.key, init->bytes,
                                            DataTypeName(*DataTypeFromCode(init->dtype)));
        BYTEPS_LOG(Error, "bad InitKey from {}: {}", c.peer_name(), why);
        c.Close(ProtocolError("bad InitKey: " + why));
        return;
      }
      ShardFor(h.key).Post(InitTask{h.key, WorkerOf(c.tag), c.shared_from_this(), init.value()});
      return;
    }
    case Opcode::kPushPull: {
      PushTask t;
      t.key = h.key;
      t.round = h.round;
      t.worker = WorkerOf(c.tag);
      t.generation = GenerationOf(c.tag);
      t.request_id = h.request_id;
      t.dtype = h.dtype;
      t.offset = h.arg;
      t.joined_share = (h.flags & protocol::kFlagJoinedShare) != 0;
      t.compressed = (h.flags & protocol::kFlagCompressed) != 0;
      if (trace_) t.arrived_ns = TraceNowNs();
      t.conn = c.shared_from_this();
      if (b.discard) {  // OnHeader found no memory for the payload
        t.failure = Unavailable(fmt::format("this server cannot allocate {} bytes for the push from {}: out of "
                                            "memory",
                                            h.payload_len, c.peer_name()));
      }
      t.data = std::static_pointer_cast<uint8_t>(b.owner);
      t.bytes = b.size;
      ShardFor(h.key).Post(std::move(t));
      return;
    }
    case Opcode::kRelease:
      ShardFor(h.key).Post(ReleaseTask{h.key, WorkerOf(c.tag), h.round});
      return;
    case Opcode::kLeave: {
      // The worker has shut down: every shard learns it (a round it never pushed cannot complete).
      BYTEPS_LOG(Info, "{} has left the job", c.peer_name());
      for (auto& shard : shards_) shard->Post(LeaveTask{WorkerOf(c.tag)});
      return;
    }
    default:
      return;
  }
}

void Server::OnClose(transport::Connection& c, const Status& reason) {
  if (transport::IsRefusal(reason)) return;  // refused: the transport logged it
  if (c.tag < 0) {
    BYTEPS_LOG(Warning, "connection from {} closed before it said Hello: {}", c.peer_name(), reason.message());
  } else {
    BYTEPS_LOG(Info, "connection from {} closed: {}", c.peer_name(), reason.message());
  }
}

}  // namespace byteps::server
