// Which address a node announces to the others: DMLC_NODE_HOST if set, else the IPv4 address of
// DMLC_INTERFACE, else loopback when the scheduler is on loopback (a one-machine job), else the
// first non-loopback IPv4 address (as ps-lite does).
#pragma once

#include <string>

namespace byteps::cluster {

std::string AdvertisedHost(const std::string& node_host, const std::string& interface,
                           const std::string& root_uri);

// The NIC rate in bytes/s of the interface that holds IPv4 address `host`, from the link speed
// the kernel reports (/sys/class/net/<interface>/speed, Mbit/s); 0 when unknown (loopback,
// virtual links that report none, an address on no interface). `gbps_override` > 0 wins
// (BYTEPS_NIC_GBPS).
double NicRate(const std::string& host, double gbps_override);

}  // namespace byteps::cluster
