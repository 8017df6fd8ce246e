// WriteBehind; see write_behind.hpp.
// A write goes through three places, in order: the gathering request (one, being built), the
// queue (closed requests, first in first out) and the in-flight set (sent, not yet answered).
// A closed request leaves the queue only when nothing in flight overlaps it, so overlapping
// writes reach the gateway in the order they were made. The gathering request is closed when it
// is full, when the next write does not continue it, or when the file has nothing in flight (the
// gateway is idle, so waiting for more would only add latency).
// Lock order: State::mu, then the ByteBudget's; neither is held while a request is sent.
#include "write_behind.hpp"

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace skein::client {

namespace {

struct Request {
  std::shared_ptr<WriteBehind::Writer> writer;
  FileRef file;
  bool append = false;
  uint64_t offset = 0;
  std::string data;
  uint64_t seq = 0;  // order of creation
};

struct Flight {
  uint64_t offset = 0;
  uint64_t size = 0;
  bool append = false;
};

// An append lands wherever the file ends when it arrives: it conflicts with everything.
bool overlaps(const Flight& f, const Request& r) {
  if (f.append || r.append) return true;
  return f.offset < r.offset + r.data.size() && r.offset < f.offset + f.size;
}

}  // namespace

struct WriteBehind::State : std::enable_shared_from_this<WriteBehind::State> {
  State(Send s, std::shared_ptr<ByteBudget> b, Limits l, std::function<void()> c)
      : send(std::move(s)), budget(std::move(b)), limits(l), changed(std::move(c)) {}

  const Send send;
  SendMany send_many;            // set before the first write, or null
  SendReporting send_reporting;  // likewise
  const std::shared_ptr<ByteBudget> budget;
  const Limits limits;
  const std::function<void()> changed;

  mutable std::mutex mu;
  std::condition_variable progress;  // a request finished
  // Guarded by mu.
  std::optional<Request> gathering;
  std::deque<Request> queued;
  std::map<uint64_t, Flight> in_flight;  // by seq
  uint64_t held_bytes = 0;               // gathering, queued and in flight
  uint64_t next_seq = 1;
  std::size_t calls = 0;  // gateway calls in flight (each of one or more requests)
  // The attributes the last write brought, while nothing has been written since.
  std::optional<FileAttr> idle_attrs;
  uint64_t calls_sent = 0;  // gateway calls taken to be sent, ever
  uint64_t errors = 0;      // writes that failed, ever (error_mark), the last with last_error
  int last_error = 0;

  // One gateway call: its requests, and whether it is all the file holds (it asks for the file's
  // attributes after it, where it can); `number` is calls_sent once it was taken.
  struct Call {
    std::vector<Request> requests;
    bool alone = false;
    uint64_t number = 0;
  };

  void close_gathering() {
    if (!gathering) return;
    queued.push_back(std::move(*gathering));
    gathering.reset();
  }

  // The queued requests that may go now, moved to the in-flight set, by gateway call; send them
  // after unlocking. With send_many, requests queued behind the calls in flight go several to a
  // call (they never overlap: a request overlapping one in flight is not taken).
  std::vector<Call> take_sendable() {
    std::vector<Call> out;
    while (!queued.empty() && calls < limits.file_requests) {
      if (send_many && queued.front().data.size() < limits.small && calls >= limits.small_calls)
        break;
      std::vector<Request> call;
      std::size_t bytes = 0;
      while (!queued.empty()) {
        Request& next = queued.front();
        bool blocked = false;
        for (const auto& [seq, flight] : in_flight) {
          if (overlaps(flight, next)) {
            blocked = true;
            break;
          }
        }
        if (blocked) break;
        if (!call.empty() &&
            (!send_many || call.size() >= limits.batch || next.writer != call.front().writer ||
             next.append || bytes + next.data.size() > limits.request))
          break;
        in_flight.emplace(next.seq, Flight{next.offset, next.data.size(), next.append});
        bytes += next.data.size();
        call.push_back(std::move(next));
        queued.pop_front();
        if (call.front().append) break;  // where an append lands depends on the one before
      }
      if (call.empty()) break;
      ++calls;
      const bool alone = call.size() == 1 && queued.empty() && !gathering && in_flight.size() == 1;
      out.push_back({std::move(call), alone, ++calls_sent});
    }
    return out;
  }

  uint64_t oldest_unfinished() const {
    uint64_t oldest = std::numeric_limits<uint64_t>::max();
    if (!queued.empty()) oldest = std::min(oldest, queued.front().seq);
    if (!in_flight.empty()) oldest = std::min(oldest, in_flight.begin()->first);
    if (gathering) oldest = std::min(oldest, gathering->seq);
    return oldest;
  }

  static void send_all(const std::shared_ptr<State>& self, std::vector<Call> calls) {
    for (auto& [call, alone, number] : calls) {
      std::vector<std::pair<uint64_t, uint64_t>> parts;  // seq, size
      for (const Request& r : call) parts.emplace_back(r.seq, r.data.size());
      auto writer = call.front().writer;
      if (alone && self->send_reporting) {
        Request& r = call.front();
        self->send_reporting(r.file, r.offset, std::move(r.data),
                             [self, parts = std::move(parts), writer, number](
                                 Result<uint32_t> got, std::optional<FileAttr> attrs) {
                               self->finished(parts, *writer, got, std::move(attrs), number);
                             });
        continue;
      }
      auto done = [self, parts = std::move(parts), writer](Result<uint32_t> got) {
        self->finished(parts, *writer, got, std::nullopt, 0);
      };
      if (call.size() == 1) {
        Request& r = call.front();
        self->send(r.file, r.offset, std::move(r.data), std::move(done));
        continue;
      }
      std::vector<GatewayClient::Extent> extents;
      extents.reserve(call.size());
      for (Request& r : call) extents.push_back({r.offset, std::move(r.data)});
      self->send_many(call.back().file, std::move(extents), std::move(done));
    }
  }

  // `attrs`: what call `number` brought back, if it asked.
  void finished(const std::vector<std::pair<uint64_t, uint64_t>>& parts, Writer& writer,
                const Result<uint32_t>& got, std::optional<FileAttr> attrs, uint64_t number) {
    std::vector<Call> sendable;
    uint64_t size = 0;
    for (const auto& [seq, n] : parts) size += n;
    {
      std::lock_guard lock(mu);
      for (const auto& [seq, n] : parts) in_flight.erase(seq);
      --calls;
      held_bytes -= size;
      int error = got ? (*got == size ? 0 : EIO) : got.error();
      if (error != 0) {
        for (int* e : {&writer.write_error_, &writer.flush_error_, &writer.fsync_error_})
          if (*e == 0) *e = error;
        ++errors;
        last_error = error;
      }
      // The file as this write left it, if it is the last: nothing was sent while it was on its
      // way (whose answers could have come first, and landed last), and nothing is held now.
      if (error == 0 && attrs && number == calls_sent && in_flight.empty() && queued.empty() &&
          !gathering)
        idle_attrs = std::move(attrs);
      else
        idle_attrs.reset();
      if (in_flight.empty() && queued.empty()) close_gathering();  // idle: send what we have
      sendable = take_sendable();
      // Under the lock: once a settle() sees this request done, its owner may go.
      if (changed) changed();
    }
    budget->release(size);
    progress.notify_all();
    // The completion running this holds a reference, so the State is alive.
    send_all(shared_from_this(), std::move(sendable));
  }
};

WriteBehind::WriteBehind(Send send, std::shared_ptr<ByteBudget> budget, Limits limits,
                         std::function<void()> changed)
    : state_(std::make_shared<State>(std::move(send), std::move(budget), limits,
                                     std::move(changed))) {}

WriteBehind::~WriteBehind() { settle(); }

Status WriteBehind::write(const std::shared_ptr<Writer>& writer, const FileRef& file,
                          uint64_t offset, std::string_view data,
                          const std::function<void()>& taken) {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    if (writer->write_error_ != 0) {
      const int error = writer->write_error_;
      writer->write_error_ = 0;
      return Status::failure(error);
    }
  }
  if (data.empty()) {
    if (taken) taken();
    return ok_status();
  }
  s.budget->acquire(data.size());
  if (s.changed) s.changed();
  // A write that fills a request by itself is copied before the lock is taken: completions
  // need the lock, and a MiB takes a while to copy.
  std::string whole;
  if (data.size() >= s.limits.request) whole.assign(data);
  std::vector<State::Call> sendable;
  {
    std::unique_lock lock(s.mu);
    s.idle_attrs.reset();
    s.progress.wait(lock, [&] {
      return s.held_bytes == 0 || s.held_bytes + data.size() <= s.limits.file_bytes;
    });
    if (s.gathering) {
      const Request& g = *s.gathering;
      const bool continues = g.writer == writer &&
                             (writer->append_ || g.offset + g.data.size() == offset) &&
                             g.data.size() + data.size() <= s.limits.request;
      if (!continues) s.close_gathering();
    }
    if (!s.gathering) {
      s.gathering = Request{writer, file, writer->append_, offset, std::move(whole), s.next_seq++};
      if (s.gathering->data.empty()) s.gathering->data.assign(data);
    } else {
      s.gathering->data.append(data);
    }
    s.gathering->file = file;  // the file's latest path, should it have been renamed
    s.held_bytes += data.size();
    if (s.gathering->data.size() >= s.limits.request || (s.in_flight.empty() && s.queued.empty()))
      s.close_gathering();
    sendable = s.take_sendable();
  }
  // The writer may go on before the requests are on their way. Once it has, its file may be
  // released and this object destroyed (its destructor waits for these requests): only the state
  // they keep alive is used from here on.
  std::shared_ptr<State> state = state_;
  if (taken) taken();
  State::send_all(state, std::move(sendable));
  return ok_status();
}

void WriteBehind::batch_with(SendMany send_many) { state_->send_many = std::move(send_many); }

void WriteBehind::report_attrs_with(SendReporting send_reporting) {
  state_->send_reporting = std::move(send_reporting);
}

std::optional<FileAttr> WriteBehind::attrs_when_idle() const {
  std::lock_guard lock(state_->mu);
  const State& s = *state_;
  if (s.gathering || !s.queued.empty() || !s.in_flight.empty()) return std::nullopt;
  return s.idle_attrs;
}

void WriteBehind::forget_attrs() {
  std::lock_guard lock(state_->mu);
  state_->idle_attrs.reset();
}

void WriteBehind::settle() {
  State& s = *state_;
  std::vector<State::Call> sendable;
  std::unique_lock lock(s.mu);
  s.close_gathering();
  const uint64_t target = s.next_seq - 1;
  sendable = s.take_sendable();
  if (!sendable.empty()) {
    lock.unlock();
    State::send_all(state_, std::move(sendable));
    lock.lock();
  }
  s.progress.wait(lock, [&] { return s.oldest_unfinished() > target; });
}

Status WriteBehind::settle(Writer& writer, Report report) {
  settle();
  std::lock_guard lock(state_->mu);
  int error = writer.flush_error_;
  writer.write_error_ = writer.flush_error_ = 0;
  if (report == Report::fsync) {
    error = writer.fsync_error_;
    writer.fsync_error_ = 0;
  }
  return error ? Status::failure(error) : ok_status();
}

uint64_t WriteBehind::error_mark() const {
  std::lock_guard lock(state_->mu);
  return state_->errors;
}

Status WriteBehind::error_since(uint64_t& mark) const {
  std::lock_guard lock(state_->mu);
  if (state_->errors == mark) return ok_status();
  mark = state_->errors;
  return Status::failure(state_->last_error);
}

bool WriteBehind::idle() const {
  std::lock_guard lock(state_->mu);
  return !state_->gathering && state_->queued.empty() && state_->in_flight.empty();
}

}  // namespace skein::client
