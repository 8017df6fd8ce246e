// Logger set-up shared by skein's programs; see logging.hpp.
#include "skein/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace skein {

bool setup_logging(const std::string& program, const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") return false;
  auto logger = spdlog::stderr_color_mt(program);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %n[%t] %^%l%$: %v");
  spdlog::set_level(lvl);
  spdlog::flush_on(spdlog::level::info);
  return true;
}

}  // namespace skein
