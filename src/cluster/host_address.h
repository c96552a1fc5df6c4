// Which address a node announces to the others: DMLC_NODE_HOST if set, else the IPv4 address of
// DMLC_INTERFACE, else loopback when the scheduler is on loopback (a one-machine job), else the
// first non-loopback IPv4 address (as ps-lite does).
#pragma once

#include <string>

namespace byteps::cluster {

std::string AdvertisedHost(const std::string& node_host, const std::string& interface,
                           const std::string& root_uri);

}  // namespace byteps::cluster
