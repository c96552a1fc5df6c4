#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace byteps::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kWarning)};
std::atomic<bool> g_hide_time{false};
std::mutex g_identity_mu;
std::string g_identity = "byteps";  // guarded by g_identity_mu

}  // namespace

std::optional<Level> ParseLevel(std::string_view s) {
  std::string u;
  for (char c : s) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (u == "TRACE") return Level::kTrace;
  if (u == "DEBUG") return Level::kDebug;
  if (u == "INFO") return Level::kInfo;
  if (u == "WARNING" || u == "WARN") return Level::kWarning;
  if (u == "ERROR") return Level::kError;
  if (u == "FATAL") return Level::kFatal;
  return std::nullopt;
}

const char* LevelName(Level l) {
  switch (l) {
    case Level::kTrace: return "TRACE";
    case Level::kDebug: return "DEBUG";
    case Level::kInfo: return "INFO";
    case Level::kWarning: return "WARNING";
    case Level::kError: return "ERROR";
    case Level::kFatal: return "FATAL";
  }
  return "?";
}

void SetLevel(Level l) { g_level.store(static_cast<int>(l)); }
Level GetLevel() { return static_cast<Level>(g_level.load()); }
void SetHideTime(bool hide) { g_hide_time.store(hide); }

void SetIdentity(std::string identity) {
  std::lock_guard<std::mutex> lock(g_identity_mu);
  g_identity = std::move(identity);
}

bool Enabled(Level l) { return static_cast<int>(l) >= g_level.load(std::memory_order_relaxed); }

void Write(Level l, const char* file, int line, std::string_view message) {
  std::string identity;
  {
    std::lock_guard<std::mutex> lock(g_identity_mu);
    identity = g_identity;
  }
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  std::string out;
  if (!g_hide_time.load()) {
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    localtime_r(&t, &tm);
    out = fmt::format("{:02}:{:02}:{:02}.{:03} ", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  }
  out += fmt::format("[{}] {} {}:{}] {}\n", identity, LevelName(l), base, line, message);
  ssize_t ignored = ::write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

}  // namespace byteps::log
