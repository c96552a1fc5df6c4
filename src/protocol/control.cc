#include "protocol/control.h"

#include <fmt/format.h>

#include <utility>

#include <nlohmann/json.hpp>

namespace byteps::protocol {
namespace {

using nlohmann::json;

// Names come from users (any bytes through the C API): invalid UTF-8 is replaced, never thrown.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

StatusOr<json> Parse(const std::string& payload, const char* what) {
  json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return ProtocolError(fmt::format("{} payload is not a JSON object ({} bytes)", what, payload.size()));
  }
  return j;
}

// Reads the fields of one JSON object into a message. The first missing or mistyped field is the
// error (a protocol error naming the message and the field); the reads after it do nothing.
class Fields {
 public:
  Fields(const json& j, const char* what) : j_(j), what_(what) {}
  const Status& status() const { return status_; }

  Fields& String(const char* field, std::string* out) {
    if (const json* v = Find(field, &json::is_string, "missing or not a string")) *out = v->get<std::string>();
    return *this;
  }

  template <typename T>
  Fields& Int(const char* field, T* out) {
    const json* v = Find(field, &json::is_number_integer, "missing or not an integer");
    if (v == nullptr) return *this;
    // get<T>() would silently wrap (e.g. "bytes": -1 -> 2^64-1), so check the range first.
    const bool fits = v->is_number_unsigned() ? std::in_range<T>(v->get<uint64_t>())
                                              : std::in_range<T>(v->get<int64_t>());
    if (!fits) return Error(fmt::format("field '{}' is out of range: {}", field, Dump(*v)));
    *out = v->get<T>();
    return *this;
  }

  Fields& Bool(const char* field, bool* out) {
    if (const json* v = Find(field, &json::is_boolean, "missing or not a boolean")) *out = v->get<bool>();
    return *this;
  }

  // A NamePlan's partitions: an array of [key, server, offset, length].
  Fields& Partitions(const char* field, std::vector<NamePartition>* out) {
    const json* v = Find(field, &json::is_array, "missing or not an array");
    if (v == nullptr) return *this;
    for (const auto& e : *v) {
      NamePartition p;
      bool ok = e.is_array() && e.size() == 4;
      for (size_t i = 0; ok && i < 4; ++i) ok = e[i].is_number_unsigned();
      if (ok) {
        p.key = e[0].get<uint64_t>();
        ok = std::in_range<int>(e[1].get<uint64_t>());
        p.server = ok ? static_cast<int>(e[1].get<uint64_t>()) : 0;
        p.offset = e[2].get<uint64_t>();
        p.length = e[3].get<uint64_t>();
      }
      if (!ok) return Error(fmt::format("field '{}' has a bad entry: {}", field, Dump(e)));
      out->push_back(p);
    }
    return *this;
  }

  // Optional fields: absent leaves *out as it is.
  template <typename T>
  Fields& OptionalInt(const char* field, T* out) {
    if (!ok() || !j_.contains(field)) return *this;
    return Int(field, out);
  }
  Fields& OptionalBool(const char* field, bool* out) {
    if (!ok() || !j_.contains(field)) return *this;
    if (const json* v = Find(field, &json::is_boolean, "is not a boolean")) *out = v->get<bool>();
    return *this;
  }
  Fields& OptionalDouble(const char* field, double* out) {
    if (!ok() || !j_.contains(field)) return *this;
    if (const json* v = Find(field, &json::is_number, "is not a number")) *out = v->get<double>();
    return *this;
  }
  Fields& OptionalDoubles(const char* field, std::vector<double>* out) {
    if (!ok() || !j_.contains(field)) return *this;
    const json* v = Find(field, &json::is_array, "is not an array");
    if (v == nullptr) return *this;
    for (const auto& e : *v) {
      if (!e.is_number()) return Error(fmt::format("field '{}' has a bad entry: {}", field, Dump(e)));
      out->push_back(e.get<double>());
    }
    return *this;
  }
  Fields& OptionalString(const char* field, std::string* out) {
    if (!ok() || !j_.contains(field)) return *this;
    if (const json* v = Find(field, &json::is_string, "is not a string")) *out = v->get<std::string>();
    return *this;
  }

  // A NodeInfo object, and an array of them.
  Fields& Node(const char* field, NodeInfo* out) {
    if (!ok()) return *this;
    auto it = j_.find(field);
    if (it == j_.end()) return Error(fmt::format("field '{}' missing", field));
    status_ = ReadNode(*it, out);
    return *this;
  }
  // An array of objects, each read by `read(Fields&, T&)`.
  template <typename T, typename Read>
  Fields& Objects(const char* field, std::vector<T>* out, Read read) {
    const json* v = Find(field, &json::is_array, "missing or not an array");
    if (v == nullptr) return *this;
    for (const auto& e : *v) {
      if (!e.is_object()) return Error(fmt::format("field '{}' has an entry that is not an object", field));
      T m;
      Fields f(e, what_);
      read(f, m);
      if (!f.ok()) {
        status_ = f.status();
        break;
      }
      out->push_back(std::move(m));
    }
    return *this;
  }
  Fields& Nodes(const char* field, std::vector<NodeInfo>* out) {
    if (!ok()) return *this;
    auto it = j_.find(field);
    if (it == j_.end() || !it->is_array()) return Error(fmt::format("field '{}' missing", field));
    for (const auto& e : *it) {
      NodeInfo n;
      status_ = ReadNode(e, &n);
      if (!ok()) break;
      out->push_back(std::move(n));
    }
    return *this;
  }

 private:
  bool ok() const { return status_.ok(); }
  Fields& Error(const std::string& m) {
    status_ = ProtocolError(fmt::format("{}: {}", what_, m));
    return *this;
  }
  // The field if it is there with the right type; else records "field '<f>' <problem>".
  const json* Find(const char* field, bool (json::*type_ok)() const noexcept, const char* problem) {
    if (!ok()) return nullptr;
    auto it = j_.find(field);
    if (it == j_.end() || !((*it).*type_ok)()) {
      Error(fmt::format("field '{}' {}", field, problem));
      return nullptr;
    }
    return &*it;
  }
  static Status ReadNode(const json& j, NodeInfo* n) {
    if (!j.is_object()) return ProtocolError("node entry is not an object");
    return Fields(j, "node").String("role", &n->role).Int("rank", &n->rank).String("host", &n->host)
        .Int("port", &n->port).Int("pid", &n->pid).status();
  }

  const json& j_;
  const char* what_;
  Status status_;
};

// Parses `payload` as the JSON object of message `what` and reads it into a T with `read`.
template <typename T, typename Read>
StatusOr<T> Decode(const std::string& payload, const char* what, Read read) {
  BYTEPS_ASSIGN_OR_RETURN(json j, Parse(payload, what));
  T m;
  Fields f(j, what);
  read(f, m);
  if (!f.status().ok()) return f.status();
  return m;
}

json ToJson(const NodeInfo& n) {
  return json{{"role", n.role}, {"rank", n.rank}, {"host", n.host}, {"port", n.port}, {"pid", n.pid}};
}

}  // namespace

std::string Describe(const NodeInfo& n) {
  if (n.rank < 0) return fmt::format("{} ({}:{}, pid {})", n.role, n.host, n.port, n.pid);  // before the rendezvous
  return fmt::format("{} {} ({}:{}, pid {})", n.role, n.rank, n.host, n.port, n.pid);
}

std::string Encode(const RegisterRequest& m) {
  return Dump(json{{"role", m.role},         {"requested_rank", m.requested_rank},
              {"host", m.host},         {"port", m.port},
              {"pid", m.pid},           {"num_workers", m.num_workers},
              {"num_servers", m.num_servers}, {"job_secret_hash", m.job_secret_hash},
              {"rejoin", m.rejoin},     {"instance", m.instance},
              {"nic_rate", m.nic_rate}});
}

std::string Encode(const RegisterReply& m) {
  json nodes = json::array();
  for (const auto& n : m.nodes) nodes.push_back(ToJson(n));
  return Dump(json{{"error", m.error}, {"rank", m.rank}, {"nodes", nodes}, {"shares", m.shares},
                    {"placement", m.placement}, {"job", m.job}, {"clock_us", m.clock_us}, {"held_us", m.held_us}});
}

std::string Encode(const NodeFailedNotice& m) {
  return Dump(json{{"node", ToJson(m.node)}, {"reason", m.reason}});
}

std::string Encode(const KeyInit& m) {
  return Dump(json{{"name", m.name}, {"bytes", m.bytes}, {"dtype", m.dtype}, {"tensor_bytes", m.tensor_bytes},
                    {"op", m.op}, {"attrs", m.attrs}, {"offset", m.offset}});
}

StatusOr<RegisterRequest> DecodeRegisterRequest(const std::string& payload) {
  return Decode<RegisterRequest>(payload, "Register", [](Fields& f, RegisterRequest& m) {
    f.String("role", &m.role).Int("requested_rank", &m.requested_rank).String("host", &m.host).Int("port", &m.port)
        .Int("pid", &m.pid).Int("num_workers", &m.num_workers).Int("num_servers", &m.num_servers)
        .String("job_secret_hash", &m.job_secret_hash)
        .OptionalBool("rejoin", &m.rejoin)           // absent: a first registration
        .OptionalString("instance", &m.instance)     // absent: unknown
        .OptionalDouble("nic_rate", &m.nic_rate);    // absent: unknown
  });
}

StatusOr<RegisterReply> DecodeRegisterReply(const std::string& payload) {
  return Decode<RegisterReply>(payload, "RegisterReply", [](Fields& f, RegisterReply& m) {
    f.String("error", &m.error).Int("rank", &m.rank).Nodes("nodes", &m.nodes)
        .OptionalDoubles("shares", &m.shares)         // absent: equal
        .OptionalString("placement", &m.placement)    // absent: not said
        .OptionalString("job", &m.job)                // absent: unknown
        .OptionalInt("clock_us", &m.clock_us)         // absent: no clock
        .OptionalInt("held_us", &m.held_us);
  });
}

StatusOr<NodeFailedNotice> DecodeNodeFailedNotice(const std::string& payload) {
  return Decode<NodeFailedNotice>(payload, "NodeFailed", [](Fields& f, NodeFailedNotice& m) {
    f.Node("node", &m.node).String("reason", &m.reason);
  });
}

StatusOr<KeyInit> DecodeKeyInit(const std::string& payload) {
  auto m = Decode<KeyInit>(payload, "InitKey", [](Fields& f, KeyInit& m) {
    f.String("name", &m.name).Int("bytes", &m.bytes).Int("dtype", &m.dtype).Int("tensor_bytes", &m.tensor_bytes)
        .OptionalString("op", &m.op)         // absent: a sum
        .OptionalString("attrs", &m.attrs)   // absent: none
        .OptionalInt("offset", &m.offset);    // absent: 0
  });
  if (m.ok() && m->op != kOpConcat && m->op != kOpAdasum && m->op != kOpJoin && !ReduceKindOfOp(m->op)) {
    return ProtocolError(fmt::format("InitKey of tensor '{}': unknown op '{}' (expected one of {}, {}, {}, {}, {}, {}, "
                                     "{})",
                                     m->name, m->op, kOpSum, kOpMin, kOpMax, kOpProduct, kOpConcat, kOpAdasum, kOpJoin));
  }
  return m;
}

std::string Encode(const NameRequest& m) {
  return Dump(json{{"name", m.name},   {"incarnation", m.incarnation}, {"generation", m.generation},
                   {"sized", m.sized}, {"bytes", m.bytes},             {"dtype", m.dtype},
                   {"partition_bytes", m.partition_bytes}, {"whole", m.whole}, {"spread", m.spread},
                   {"server", m.server}, {"probe_seconds", m.probe_seconds}, {"probe_bytes", m.probe_bytes}});
}

std::string Encode(const NameReply& m) {
  const NamePlan& p = m.plan;
  json parts = json::array();
  for (const NamePartition& x : p.partitions) parts.push_back(json::array({x.key, x.server, x.offset, x.length}));
  return Dump(json{{"error", m.error},
                   {"error_code", m.error_code},
                   {"name", p.name},
                   {"incarnation", p.incarnation},
                   {"generation", p.generation},
                   {"index", p.index},
                   {"declared_key", p.declared_key},
                   {"sized", p.sized},
                   {"bytes", p.bytes},
                   {"dtype", p.dtype},
                   {"partitions", parts},
                   {"shares", m.shares},
                   {"placement", m.placement}});
}

StatusOr<NameRequest> DecodeNameRequest(const std::string& payload) {
  return Decode<NameRequest>(payload, "NameRequest", [](Fields& f, NameRequest& m) {
    f.String("name", &m.name).Int("incarnation", &m.incarnation).Int("generation", &m.generation)
        .Bool("sized", &m.sized).Int("bytes", &m.bytes).Int("dtype", &m.dtype)
        .Int("partition_bytes", &m.partition_bytes)
        .OptionalBool("whole", &m.whole)     // absent: may be split
        .OptionalBool("spread", &m.spread)   // absent: placed by bytes
        .OptionalInt("server", &m.server)    // absent: -1, placed by bytes
        .OptionalDoubles("probe_seconds", &m.probe_seconds)  // absent: a tensor's request
        .OptionalInt("probe_bytes", &m.probe_bytes);
  });
}

StatusOr<NameReply> DecodeNameReply(const std::string& payload) {
  return Decode<NameReply>(payload, "NameReply", [](Fields& f, NameReply& m) {
    NamePlan& p = m.plan;
    f.String("error", &m.error).Int("error_code", &m.error_code).String("name", &p.name)
        .Int("incarnation", &p.incarnation).Int("generation", &p.generation).Int("index", &p.index)
        .Int("declared_key", &p.declared_key).Bool("sized", &p.sized).Int("bytes", &p.bytes).Int("dtype", &p.dtype)
        .Partitions("partitions", &p.partitions)
        .OptionalDoubles("shares", &m.shares)         // absent: not a probe's answer
        .OptionalString("placement", &m.placement);
  });
}

std::string Encode(const TopReply& m) {
  json nodes = json::array();
  for (const TopNode& n : m.nodes) {
    nodes.push_back(json{{"node", ToJson(n.node)}, {"heard_s", n.heard_s}, {"finished", n.finished}, {"away", n.away},
                         {"summary", n.summary}, {"previous", n.previous}});
  }
  return Dump(json{{"job", m.job}, {"num_workers", m.num_workers}, {"num_servers", m.num_servers},
                   {"started", m.started}, {"uptime_s", m.uptime_s}, {"placement", m.placement}, {"nodes", nodes}});
}

StatusOr<TopReply> DecodeTopReply(const std::string& payload) {
  return Decode<TopReply>(payload, "TopReply", [](Fields& f, TopReply& m) {
    f.String("job", &m.job).Int("num_workers", &m.num_workers).Int("num_servers", &m.num_servers)
        .Bool("started", &m.started).OptionalDouble("uptime_s", &m.uptime_s).String("placement", &m.placement)
        .Objects("nodes", &m.nodes, [](Fields& g, TopNode& n) {
          g.Node("node", &n.node).OptionalDouble("heard_s", &n.heard_s).Bool("finished", &n.finished)
              .Bool("away", &n.away).String("summary", &n.summary).String("previous", &n.previous);
        });
  });
}

std::optional<ReduceKind> ReduceKindOfOp(const std::string& op) {
  if (op == kOpSum) return ReduceKind::kSum;
  if (op == kOpMin) return ReduceKind::kMin;
  if (op == kOpMax) return ReduceKind::kMax;
  if (op == kOpProduct) return ReduceKind::kProduct;
  return std::nullopt;
}

const char* OpOfReduceKind(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return kOpSum;
    case ReduceKind::kMin: return kOpMin;
    case ReduceKind::kMax: return kOpMax;
    case ReduceKind::kProduct: return kOpProduct;
  }
  return kOpSum;
}

std::vector<std::pair<std::string, std::string>> ParseAttrs(const std::string& attrs) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t start = 0;
  while (start <= attrs.size()) {
    size_t end = attrs.find(';', start);
    if (end == std::string::npos) end = attrs.size();
    const std::string item = attrs.substr(start, end - start);
    if (!item.empty()) {
      const size_t eq = item.find('=');
      out.emplace_back(item.substr(0, eq), eq == std::string::npos ? "" : item.substr(eq + 1));
    }
    start = end + 1;
  }
  return out;
}

}  // namespace byteps::protocol
