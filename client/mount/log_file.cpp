// skein-mount's log file; see log_file.hpp.
#include "log_file.hpp"

#include <fcntl.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace skein::client {

std::optional<std::string> log_to_file(const std::string& path) {
  // A new log is its owner's only: it names the files its users worked on (a job's mount log,
  // in a directory every user may list). One that exists keeps the mode it has.
  if (const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600); fd >= 0)
    ::close(fd);
  try {
    auto previous = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
    auto logger = std::make_shared<spdlog::logger>(previous->name(), std::move(sink));
    logger->set_level(previous->level());
    // Several mounts may share one file: the pid tells them apart.
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %n[%P:%t] %l: %v");
    // No periodic flusher thread (it would not survive the fork): flush every message that is
    // logged at all when debugging, otherwise at info and above.
    logger->flush_on(std::min(previous->level(), spdlog::level::info));
    spdlog::set_default_logger(std::move(logger));
    return std::nullopt;
  } catch (const spdlog::spdlog_ex& e) {
    return std::string(e.what());
  }
}

std::optional<std::string> stderr_to_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return std::string(std::strerror(errno));
  const int rc = ::dup2(fd, STDERR_FILENO);
  const int saved = errno;
  ::close(fd);
  if (rc < 0) return std::string(std::strerror(saved));
  return std::nullopt;
}

}  // namespace skein::client
