// Cutting the remote watcher's output into events and lines; see inotify_output.hpp.
#include "coherence/inotify_output.hpp"

namespace skein {

void InotifyOutput::append(const char* data, std::size_t n) {
  if (at_ > 0 && at_ >= buf_.size() / 2) {
    buf_.erase(0, at_);
    at_ = 0;
  }
  buf_.append(data, n);
}

std::optional<InotifyOutput::Item> InotifyOutput::next() {
  for (;;) {
    // The first word: an event's names run up to a space, and only names of that kind do.
    std::size_t word_end = at_;
    while (word_end < buf_.size()) {
      const char c = buf_[word_end];
      if (!((c >= 'A' && c <= 'Z') || c == '_' || c == ',')) break;
      ++word_end;
    }
    if (word_end == buf_.size()) {  // the first word goes on past what came so far
      if (buf_.size() - at_ > kMaxItem) at_ = buf_.size();
      return std::nullopt;
    }
    const bool event = word_end > at_ && buf_[word_end] == ' ';
    const char end_of_item = event && nul_events_ ? '\0' : '\n';
    const std::size_t end = buf_.find(end_of_item, word_end);
    if (end == std::string::npos) {
      if (buf_.size() - at_ > kMaxItem) at_ = buf_.size();
      return std::nullopt;
    }
    Item item;
    item.event = event;
    if (event) {
      item.events = buf_.substr(at_, word_end - at_);
      item.path = buf_.substr(word_end + 1, end - word_end - 1);
    } else {
      item.text = buf_.substr(at_, end - at_);
    }
    at_ = end + 1;
    if (!event && item.text == kNulEvents) {
      nul_events_ = true;
      continue;
    }
    return item;
  }
}

}  // namespace skein
