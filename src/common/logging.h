// Logging facade: one process-wide sink (stderr), levels, every line prefixed with role:rank.
// The identity and level are set once by Init / the CLI; hot paths log at TRACE only.
// Threading: all functions are thread-safe; a line is written with one write(2).
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>

namespace byteps::log {

enum class Level : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kFatal = 5 };

// Parses TRACE/DEBUG/INFO/WARNING/WARN/ERROR/FATAL, case-insensitive.
std::optional<Level> ParseLevel(std::string_view s);
const char* LevelName(Level l);

void SetLevel(Level l);
Level GetLevel();
// e.g. "worker:1", "server:0", "scheduler". Shown in brackets at the start of each line.
void SetIdentity(std::string identity);
void SetHideTime(bool hide);

bool Enabled(Level l);
void Write(Level l, const char* file, int line, std::string_view message);

}  // namespace byteps::log

#define BYTEPS_LOG(level, ...)                                                            \
  do {                                                                                    \
    if (::byteps::log::Enabled(::byteps::log::Level::k##level))                           \
      ::byteps::log::Write(::byteps::log::Level::k##level, __FILE__, __LINE__,            \
                           ::fmt::format(__VA_ARGS__));                                   \
  } while (0)

// Our own invariants only (never for peer/user errors): logs and aborts.
#define BYTEPS_CHECK(cond)                                                                \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      ::byteps::log::Write(::byteps::log::Level::kFatal, __FILE__, __LINE__,              \
                           "check failed: " #cond);                                       \
      ::abort();                                                                          \
    }                                                                                     \
  } while (0)
