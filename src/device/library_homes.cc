#include "device/library_homes.h"

#include <mutex>
#include <utility>

namespace byteps::device {
namespace {
std::mutex g_mu;
LibraryHomes g_homes;  // guarded by g_mu
}  // namespace

void SetLibraryHomes(LibraryHomes homes) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_homes = std::move(homes);
}

LibraryHomes GetLibraryHomes() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_homes;
}

}  // namespace byteps::device
