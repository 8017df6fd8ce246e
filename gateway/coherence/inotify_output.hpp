// InotifyOutput: cuts what the remote watcher's command prints into inotifywait's events and
// the other lines (inotifywait's messages, the command's heartbeat and markers).
//
// An event is printed "EVENTS PATH": comma-separated upper-case event names, a space, the path.
// A file name may hold any byte but '/' and NUL, newlines and trailing spaces included, so an
// event cannot end at a newline: an inotifywait that knows --no-newline (Debian 12's 3.22 does)
// ends each event with a NUL instead (format "%e %w%f%0"), and the command says so with a
// kNulEvents line before it starts it. An older inotifywait ends each with a newline, and a name
// with a newline in it splits its event: the part after the newline comes as a line of its own
// (nul_events() false: such a line may be one).
// Messages (inotifywait's stderr, in the same stream) and the command's own lines end at a
// newline in either case.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace skein {

class InotifyOutput {
 public:
  // The line the remote command prints when the inotifywait it starts ends events with a NUL.
  static constexpr const char* kNulEvents = "SKEIN-NUL-EVENTS";

  struct Item {
    bool event = false;  // an event (events, path) or another line (text)
    std::string events;  // "CLOSE_WRITE,CLOSE"
    std::string path;    // as inotifywait printed it: the watched root and below
    std::string text;    // a line that is no event, without its newline
  };

  void append(const char* data, std::size_t n);
  // The next whole item, or nothing until more is appended. The kNulEvents line switches the
  // mode and is not returned.
  std::optional<Item> next();
  // Whether events end at a NUL (the kNulEvents line came).
  bool nul_events() const { return nul_events_; }

  // Longer than any path and event names (PATH_MAX is 4096): an unended item this long is no
  // item of inotifywait's, and is dropped rather than kept growing.
  static constexpr std::size_t kMaxItem = 65536;

 private:
  std::string buf_;
  std::size_t at_ = 0;  // where the next item starts in buf_
  bool nul_events_ = false;
};

}  // namespace skein
