#include "worker/planning/server_layout.h"

#include <algorithm>
#include <set>
#include <string>

namespace byteps::worker::planning {

bool ServersShareTheWorkersHosts(const std::vector<protocol::NodeInfo>& workers,
                                 const std::vector<protocol::NodeInfo>& servers) {
  std::set<std::string> worker_hosts, server_hosts;
  for (const auto& w : workers) worker_hosts.insert(w.host);
  for (const auto& s : servers) server_hosts.insert(s.host);
  std::set<std::string> all = server_hosts;
  all.insert(worker_hosts.begin(), worker_hosts.end());
  return all.size() > 1 && std::includes(server_hosts.begin(), server_hosts.end(), worker_hosts.begin(),
                                         worker_hosts.end());
}

bool ServersOnBothKindsOfMachine(const std::vector<protocol::NodeInfo>& workers,
                                 const std::vector<protocol::NodeInfo>& servers) {
  std::set<std::string> worker_hosts;
  bool all_loopback = true;
  for (const auto& w : workers) worker_hosts.insert(w.host);
  bool colocated = false, cpu = false;
  for (const auto& s : servers) {
    (worker_hosts.count(s.host) ? colocated : cpu) = true;
    all_loopback = all_loopback && (s.host.starts_with("127.") || s.host == "::1" || s.host == "localhost");
  }
  return colocated && cpu && !all_loopback;
}

}  // namespace byteps::worker::planning
