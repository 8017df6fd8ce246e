// Logger set-up shared by skein's programs: one spdlog logger to stderr, level by name.
#pragma once

#include <string>

namespace skein {

// Sets the default logger's level and pattern. Returns false (and changes nothing) on an unknown
// level name; the known ones are trace, debug, info, warn, error, critical, off.
bool setup_logging(const std::string& program, const std::string& level);

// Whether setup_logging knows `level`.
bool is_log_level(const std::string& level);

}  // namespace skein
