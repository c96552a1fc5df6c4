#include "common/report_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace byteps::report_file {

std::string Folder(bool trace_on, const std::string& trace_dir, const std::string& tmp_dir) {
  return trace_on ? trace_dir : tmp_dir;
}

StatusOr<std::string> Write(const std::string& folder, const std::string& stem, const std::string& text) {
  const std::string path = fmt::format("{}/byteps-stall-{}-{}.txt", folder, stem, getpid());
  const std::string partial = path + ".part";
  FILE* f = std::fopen(partial.c_str(), "w");
  if (f == nullptr) return Unavailable(fmt::format("cannot write the stall report {}: {}", partial, std::strerror(errno)));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int saved = errno;
  if (std::fclose(f) != 0 || !written) {
    std::remove(partial.c_str());
    return Unavailable(fmt::format("cannot write the stall report {}: {}", partial, std::strerror(written ? errno : saved)));
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(partial.c_str());
    return Unavailable(fmt::format("cannot write the stall report {}: {}", path, std::strerror(e)));
  }
  return path;
}

}  // namespace byteps::report_file
