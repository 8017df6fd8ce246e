// skein-mount's log destination once it runs as a daemon, when stderr is /dev/null: a file.
#pragma once

#include <optional>
#include <string>

namespace skein::client {

// Sends the default logger's output to `path` (appended to), keeping its name and level. Call
// before forking: the file is opened here, so a bad path is reported while stderr is still seen.
// Returns the reason on failure.
std::optional<std::string> log_to_file(const std::string& path);

// Points stderr at `path` too (appended to), so that what the C++ runtime, libfuse or a fatal
// signal's report write there after the daemon has forked is not lost. Returns the reason on
// failure, leaving stderr as it was.
std::optional<std::string> stderr_to_file(const std::string& path);

}  // namespace skein::client
