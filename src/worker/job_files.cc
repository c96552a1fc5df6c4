#include "worker/job_files.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "common/logging.h"

namespace byteps::worker {

namespace fs = std::filesystem;

namespace {

fs::path Dir() {
  std::error_code ec;
  fs::path d = fs::temp_directory_path(ec);
  return ec ? fs::path("/tmp") : d;
}

std::string Prefix(const config::Config& c) { return fmt::format("byteps-{}-worker", JobToken(c)); }

constexpr const char* kSuffix = ".settings";

std::string Escape(const std::string& s) {  // one line per field
  std::string out;
  for (char ch : s) out += (ch == '\n' || ch == '\r') ? ' ' : ch;
  return out;
}

}  // namespace

std::string JobToken(const config::Config& c) {
  std::string seed = !c.job_secret.empty()   ? c.job_secret
                     : c.root_port > 0       ? fmt::format("{}:{}", c.root_uri, c.root_port)
                                             : fmt::format("ppid{}", getppid());
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : seed) h = (h ^ ch) * 1099511628211ull;
  return fmt::format("{:012x}", h & 0xffffffffffffull);
}

std::string SettingsRecordPath(const config::Config& c, int rank) {
  return (Dir() / fmt::format("{}{}{}", Prefix(c), rank, kSuffix)).string();
}

std::string SettingsRecordPattern(const config::Config& c) {
  return (Dir() / fmt::format("{}<rank>{}", Prefix(c), kSuffix)).string();
}

void WriteSettingsRecord(const config::Config& c, const SettingsRecord& r) {
  const std::string path = SettingsRecordPath(c, r.rank);
  const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  std::time_t now = std::time(nullptr);
  char when[64] = "";
  std::tm tm{};
  if (localtime_r(&now, &tm)) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << "rank=" << r.rank << "\npid=" << getpid() << "\nwritten=" << when << "\npartition_bytes="
      << r.partition_bytes << "\ncredit_bytes=" << r.credit_bytes << "\nreport=" << Escape(r.report)
      << "\nplacement=" << Escape(r.placement) << "\n";
    if (!f) {
      BYTEPS_LOG(Debug, "settings record {}: cannot write ({})", tmp, std::strerror(errno));
      std::error_code ec;
      fs::remove(tmp, ec);
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    BYTEPS_LOG(Debug, "settings record {}: {}", path, ec.message());
    fs::remove(tmp, ec);
  }
}

void RemoveSettingsRecord(const config::Config& c, int rank) {
  std::error_code ec;
  fs::remove(SettingsRecordPath(c, rank), ec);
}

std::vector<SettingsRecord> ReadSettingsRecords(const config::Config& c) {
  std::vector<SettingsRecord> out;
  const std::string prefix = Prefix(c);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(Dir(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.size() < std::char_traits<char>::length(kSuffix) ||
        name.compare(name.size() - std::char_traits<char>::length(kSuffix), std::string::npos, kSuffix) != 0) {
      continue;
    }
    std::ifstream f(entry.path());
    SettingsRecord r;
    r.path = entry.path().string();
    bool ok = false;
    for (std::string line; std::getline(f, line);) {
      const auto eq = line.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
      try {
        if (k == "rank") r.rank = std::stoi(v), ok = true;
        else if (k == "pid") r.pid = std::stol(v);
        else if (k == "written") r.written = v;
        else if (k == "partition_bytes") r.partition_bytes = std::stoull(v);
        else if (k == "credit_bytes") r.credit_bytes = std::stoull(v);
        else if (k == "report") r.report = v;
        else if (k == "placement") r.placement = v;
      } catch (const std::exception&) {
        ok = false;
        break;
      }
    }
    if (!ok) continue;
    r.running = r.pid > 0 && (kill(static_cast<pid_t>(r.pid), 0) == 0 || errno == EPERM);
    out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const SettingsRecord& a, const SettingsRecord& b) { return a.rank < b.rank; });
  return out;
}

}  // namespace byteps::worker
