// Logger set-up shared by skein's programs; see logging.hpp.
#include "skein/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace skein {

bool is_log_level(const std::string& level) {
  return spdlog::level::from_str(level) != spdlog::level::off || level == "off";
}

bool setup_logging(const std::string& program, const std::string& level) {
  if (!is_log_level(level)) return false;
  auto lvl = spdlog::level::from_str(level);
  auto logger = spdlog::stderr_color_mt(program);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %n[%t] %^%l%$: %v");
  spdlog::set_level(lvl);
  spdlog::flush_on(spdlog::level::info);
  return true;
}

}  // namespace skein
