#include "cluster/host_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <fstream>

namespace byteps::cluster {
namespace {

std::string FirstIpv4(const std::string& interface, bool want_loopback) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!interface.empty() && interface != i->ifa_name) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    std::string addr = buf;
    bool loop = addr.rfind("127.", 0) == 0;
    if (interface.empty() && loop != want_loopback) continue;
    found = addr;
    break;
  }
  freeifaddrs(list);
  return found;
}

// The name of the interface holding IPv4 address `host`, or "".
std::string InterfaceOf(const std::string& host) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    if (host == buf) found = i->ifa_name;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

double NicRate(const std::string& host, double gbps_override) {
  if (gbps_override > 0) return gbps_override * 1e9 / 8;
  const std::string interface = InterfaceOf(host);
  if (interface.empty() || interface == "lo") return 0;
  std::ifstream f("/sys/class/net/" + interface + "/speed");
  long mbit = 0;
  if (!(f >> mbit) || mbit <= 0) return 0;  // -1 or unreadable: a link that reports no speed
  return static_cast<double>(mbit) * 1e6 / 8;
}

std::string AdvertisedHost(const std::string& node_host, const std::string& interface, const std::string& root_uri) {
  if (!node_host.empty()) return node_host;
  if (!interface.empty()) {
    std::string a = FirstIpv4(interface, false);
    if (!a.empty()) return a;
  }
  if (root_uri.empty() || root_uri.rfind("127.", 0) == 0 || root_uri == "localhost") return "127.0.0.1";
  std::string a = FirstIpv4("", false);
  return a.empty() ? "127.0.0.1" : a;
}

}  // namespace byteps::cluster
