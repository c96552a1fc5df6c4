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

// Typed field readers: a missing or mistyped field is a protocol error naming it.
Status GetString(const json& j, const char* field, std::string* out, const char* what) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) {
    return ProtocolError(fmt::format("{}: field '{}' missing or not a string", what, field));
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

template <typename T>
Status GetInt(const json& j, const char* field, T* out, const char* what) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_number_integer()) {
    return ProtocolError(fmt::format("{}: field '{}' missing or not an integer", what, field));
  }
  // get<T>() would silently wrap (e.g. "bytes": -1 -> 2^64-1), so check the range first.
  const bool fits = it->is_number_unsigned() ? std::in_range<T>(it->get<uint64_t>())
                                             : std::in_range<T>(it->get<int64_t>());
  if (!fits) {
    return ProtocolError(fmt::format("{}: field '{}' is out of range: {}", what, field, Dump(*it)));
  }
  *out = it->get<T>();
  return Status::Ok();
}

json ToJson(const NodeInfo& n) {
  return json{{"role", n.role}, {"rank", n.rank}, {"host", n.host}, {"port", n.port}, {"pid", n.pid}};
}

Status FromJson(const json& j, NodeInfo* n) {
  if (!j.is_object()) return ProtocolError("node entry is not an object");
  BYTEPS_RETURN_IF_ERROR(GetString(j, "role", &n->role, "node"));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "rank", &n->rank, "node"));
  BYTEPS_RETURN_IF_ERROR(GetString(j, "host", &n->host, "node"));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "port", &n->port, "node"));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "pid", &n->pid, "node"));
  return Status::Ok();
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
              {"rejoin", m.rejoin},     {"instance", m.instance}});
}

std::string Encode(const RegisterReply& m) {
  json nodes = json::array();
  for (const auto& n : m.nodes) nodes.push_back(ToJson(n));
  return Dump(json{{"error", m.error}, {"rank", m.rank}, {"nodes", nodes}});
}

std::string Encode(const NodeFailedNotice& m) {
  return Dump(json{{"node", ToJson(m.node)}, {"reason", m.reason}});
}

std::string Encode(const KeyInit& m) {
  return Dump(json{{"name", m.name}, {"bytes", m.bytes}, {"dtype", m.dtype}, {"tensor_bytes", m.tensor_bytes}});
}

StatusOr<RegisterRequest> DecodeRegisterRequest(const std::string& payload) {
  const char* what = "Register";
  BYTEPS_ASSIGN_OR_RETURN(json j, Parse(payload, what));
  RegisterRequest m;
  BYTEPS_RETURN_IF_ERROR(GetString(j, "role", &m.role, what));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "requested_rank", &m.requested_rank, what));
  BYTEPS_RETURN_IF_ERROR(GetString(j, "host", &m.host, what));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "port", &m.port, what));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "pid", &m.pid, what));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "num_workers", &m.num_workers, what));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "num_servers", &m.num_servers, what));
  BYTEPS_RETURN_IF_ERROR(GetString(j, "job_secret_hash", &m.job_secret_hash, what));
  if (auto it = j.find("rejoin"); it != j.end()) {  // optional (absent: a first registration)
    if (!it->is_boolean()) return ProtocolError(fmt::format("{}: field 'rejoin' is not a boolean", what));
    m.rejoin = it->get<bool>();
  }
  if (auto it = j.find("instance"); it != j.end()) {  // optional (absent: unknown)
    if (!it->is_string()) return ProtocolError(fmt::format("{}: field 'instance' is not a string", what));
    m.instance = it->get<std::string>();
  }
  return m;
}

StatusOr<RegisterReply> DecodeRegisterReply(const std::string& payload) {
  const char* what = "RegisterReply";
  BYTEPS_ASSIGN_OR_RETURN(json j, Parse(payload, what));
  RegisterReply m;
  BYTEPS_RETURN_IF_ERROR(GetString(j, "error", &m.error, what));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "rank", &m.rank, what));
  auto it = j.find("nodes");
  if (it == j.end() || !it->is_array()) return ProtocolError("RegisterReply: field 'nodes' missing");
  for (const auto& e : *it) {
    NodeInfo n;
    BYTEPS_RETURN_IF_ERROR(FromJson(e, &n));
    m.nodes.push_back(std::move(n));
  }
  return m;
}

StatusOr<NodeFailedNotice> DecodeNodeFailedNotice(const std::string& payload) {
  const char* what = "NodeFailed";
  BYTEPS_ASSIGN_OR_RETURN(json j, Parse(payload, what));
  NodeFailedNotice m;
  auto it = j.find("node");
  if (it == j.end()) return ProtocolError("NodeFailed: field 'node' missing");
  BYTEPS_RETURN_IF_ERROR(FromJson(*it, &m.node));
  BYTEPS_RETURN_IF_ERROR(GetString(j, "reason", &m.reason, what));
  return m;
}

StatusOr<KeyInit> DecodeKeyInit(const std::string& payload) {
  const char* what = "InitKey";
  BYTEPS_ASSIGN_OR_RETURN(json j, Parse(payload, what));
  KeyInit m;
  BYTEPS_RETURN_IF_ERROR(GetString(j, "name", &m.name, what));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "bytes", &m.bytes, what));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "dtype", &m.dtype, what));
  BYTEPS_RETURN_IF_ERROR(GetInt(j, "tensor_bytes", &m.tensor_bytes, what));
  return m;
}

}  // namespace byteps::protocol
