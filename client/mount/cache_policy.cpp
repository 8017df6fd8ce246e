// Kernel cache lifetimes and page-cache keeping; see cache_policy.hpp.
#include "cache_policy.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>

namespace skein::client {

double CachePolicy::timeout(Ticket t) const {
  const uint64_t now = state_.load(std::memory_order_acquire);
  if ((now & 1) == 0 || (t.word_ & 1) == 0) return options_.safe_ttl;
  return now == t.word_ ? options_.cache_ttl : 0.0;
}

double CachePolicy::current_timeout() const {
  return healthy() ? options_.cache_ttl : options_.safe_ttl;
}

void CachePolicy::sent_attrs(InodeNumber ino, const FileAttr& attr, Ticket t) {
  std::lock_guard lock(mu_);
  Known& k = known_[ino];
  k.sent = true;
  k.sent_mtime_ns = attr.mtime_ns;
  k.sent_size = attr.size;
  // Read under the lock: an invalidation bumps the state before it takes the lock to forget.
  const uint64_t now = state_.load(std::memory_order_acquire);
  const bool current = healthy_throughout(now, t);
  const bool dir = (attr.mode & S_IFMT) == S_IFDIR;
  if (dir && current) {
    k.dir_attrs = attr;
  } else {
    k.dir_attrs.reset();
  }
  if (!dir && current && options_.deferred_open &&
      servers_watched_.load(std::memory_order_acquire)) {
    k.file_attrs = attr;
  } else {
    k.file_attrs.reset();
  }
}

CachePolicy::OpenDecision CachePolicy::opened(Ticket t, InodeNumber ino, int64_t mtime_ns,
                                              uint64_t size) {
  OpenDecision decision;
  std::lock_guard lock(mu_);
  // Read under the lock: an invalidation of `ino` bumps the state and records `ino` in one hold.
  const bool kept = open_unspoilt(state_.load(std::memory_order_acquire), t, ino);
  Known& k = known_[ino];
  decision.refresh_attrs = !k.sent || k.sent_mtime_ns != mtime_ns || k.sent_size != size;
  decision.keep_cache = kept && k.opened && k.open_mtime_ns == mtime_ns && k.open_size == size;
  // Attributes that may predate an invalidation are no basis for keeping pages next time.
  k.opened = kept;
  k.open_mtime_ns = mtime_ns;
  k.open_size = size;
  k.open_writes = k.writes;
  if (decision.refresh_attrs) {  // the kernel will ask again; what it was told is not current
    k.sent = false;
    // Attributes kept as current stay if they are the open's (a deferred open's come from them):
    // the kernel's are the old ones.
    if (k.file_attrs && (k.file_attrs->mtime_ns != mtime_ns || k.file_attrs->size != size))
      k.file_attrs.reset();
  }
  return decision;
}

bool CachePolicy::open_matches(InodeNumber ino, int64_t mtime_ns, uint64_t size) const {
  if (!healthy()) return false;
  std::lock_guard lock(mu_);
  auto it = known_.find(ino);
  return it != known_.end() && it->second.opened && it->second.open_mtime_ns == mtime_ns &&
         it->second.open_size == size && it->second.writes == it->second.open_writes;
}

void CachePolicy::listed(Ticket t, InodeNumber ino) {
  // The state is read under the lock: an invalidation of `ino` bumps it before it takes the lock
  // to forget `ino`, so either this sees the bump or the invalidation comes after and clears it.
  std::lock_guard lock(mu_);
  const uint64_t now = state_.load(std::memory_order_acquire);
  if (!healthy_throughout(now, t)) return;  // no basis to keep it
  known_[ino].listed = true;
}

bool CachePolicy::keep_listing(InodeNumber ino) const {
  if (!healthy()) return false;
  std::lock_guard lock(mu_);
  auto it = known_.find(ino);
  return it != known_.end() && it->second.listed;
}

CachePolicy::Mutation CachePolicy::begin_mutation() {
  Mutation m;
  m.ticket = ticket();
  m.number = mutations_.fetch_add(1, std::memory_order_acq_rel) + 1;
  std::lock_guard lock(mu_);
  drop_all_ahead_locked();  // a rename may move any directory's entries
  return m;
}

CachePolicy::Mutation CachePolicy::begin_mutation(InodeNumber dir) {
  Mutation m;
  m.ticket = ticket();
  m.dir = dir;
  std::lock_guard lock(mu_);
  drop_ahead_locked(dir);
  m.number = mutations_.load(std::memory_order_acquire);
  auto it = known_.find(dir);
  if (it != known_.end()) m.dir_number = ++it->second.mutations;
  return m;
}

void CachePolicy::dir_changed(InodeNumber dir) {
  std::lock_guard lock(mu_);
  auto it = known_.find(dir);
  if (it != known_.end()) it->second.dir_attrs.reset();
}

void CachePolicy::post_op_attrs(InodeNumber dir, const FileAttr& attr, const Mutation& m) {
  std::lock_guard lock(mu_);
  auto it = known_.find(dir);
  if (it == known_.end()) return;  // the kernel holds nothing of it
  it->second.dir_attrs.reset();
  // An invalidation of the directory (an entry's invalidates it too) while the reply was on its
  // way; invalidations of other inodes leave it as good as an open's (open_unspoilt).
  const uint64_t now = state_.load(std::memory_order_acquire);
  if (!open_unspoilt(now, m.ticket, dir)) return;
  // Another change that may have touched the directory began: one of any directory, or one of
  // this directory (a directory unknown when `m` began counted none of its changes).
  if (mutations_.load(std::memory_order_acquire) != m.number) return;
  if (m.dir != dir || m.dir_number == 0 || it->second.mutations != m.dir_number) return;
  it->second.dir_attrs = attr;
}

std::optional<std::pair<FileAttr, double>> CachePolicy::dir_attrs(InodeNumber dir) const {
  if (!healthy()) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = known_.find(dir);
  if (it == known_.end() || !it->second.dir_attrs) return std::nullopt;
  return std::make_pair(*it->second.dir_attrs, options_.cache_ttl);
}

std::optional<FileAttr> CachePolicy::current_attrs(InodeNumber ino) const {
  if (!healthy() || !servers_watched_.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = known_.find(ino);
  if (it == known_.end()) return std::nullopt;
  return it->second.file_attrs;
}

void CachePolicy::made_file(InodeNumber ino, uint32_t owner) {
  std::lock_guard lock(mu_);
  known_[ino].made_owner = owner;
}

std::optional<uint32_t> CachePolicy::made_owner(InodeNumber ino) const {
  std::lock_guard lock(mu_);
  auto it = known_.find(ino);
  return it == known_.end() ? std::nullopt : it->second.made_owner;
}

uint64_t CachePolicy::wrote(InodeNumber ino) {
  std::lock_guard lock(mu_);
  Known& k = known_[ino];
  ++k.writes;
  k.file_attrs.reset();
  drop_content_locked(ino);
  return k.writes;
}

uint64_t CachePolicy::writes(InodeNumber ino) const {
  std::lock_guard lock(mu_);
  auto it = known_.find(ino);
  return it == known_.end() ? 0 : it->second.writes;
}

bool CachePolicy::keep_file_attrs_locked(InodeNumber ino, const FileAttr& attr, Ticket t,
                                         uint64_t writes) {
  if (!options_.deferred_open || !S_ISREG(attr.mode) ||
      !servers_watched_.load(std::memory_order_acquire))
    return false;
  if (!open_unspoilt(state_.load(std::memory_order_acquire), t, ino)) return false;
  auto it = known_.find(ino);
  // Forgotten meanwhile (an invalidation, a forget) or written: a write count of 0 is right
  // only for an inode that was never written, which has no entry to lose.
  if ((it == known_.end() ? 0 : it->second.writes) != writes) return false;
  known_[ino].file_attrs = attr;
  return true;
}

void CachePolicy::server_attrs(InodeNumber ino, const FileAttr& attr, Ticket t, uint64_t writes) {
  std::lock_guard lock(mu_);
  (void)keep_file_attrs_locked(ino, attr, t, writes);
}

void CachePolicy::wrote_whole(InodeNumber ino, const FileAttr& attr, Ticket t, uint64_t writes,
                              std::string_view content) {
  std::lock_guard lock(mu_);
  (void)keep_whole_locked(ino, attr, t, writes, content);
}

void CachePolicy::read_ahead_whole(InodeNumber ino, const FileAttr& attr, Ticket t, uint64_t writes,
                                   std::string_view content) {
  std::lock_guard lock(mu_);
  if (keep_whole_locked(ino, attr, t, writes, content)) ++ahead_contents_;
}

bool CachePolicy::keep_whole_locked(InodeNumber ino, const FileAttr& attr, Ticket t,
                                    uint64_t writes, std::string_view content) {
  // The file holds more than the bytes (written after them, or changed while being read).
  if (attr.size != content.size()) return false;
  if (!keep_file_attrs_locked(ino, attr, t, writes)) return false;
  keep_content_locked(ino, attr, content);
  return true;
}

void CachePolicy::keep_content_locked(InodeNumber ino, const FileAttr& attr,
                                      std::string_view content) {
  drop_content_locked(ino);
  if (content.size() > kContentFileBytes) return;
  const uint64_t number = ++contents_made_;
  content_bytes_ += content.size();
  contents_[ino] = Content{std::make_shared<const std::string>(content), attr.mtime_ns, number};
  if (content_order_.size() >= 2 * contents_.size() + 64) {
    // Mostly contents dropped since (written, renamed, removed): forget them, or a loop of
    // creates and removes next to one kept file would grow the order without bound.
    std::deque<std::pair<InodeNumber, uint64_t>> live;
    for (const auto& [i, n] : content_order_)
      if (auto c = contents_.find(i); c != contents_.end() && c->second.number == n)
        live.emplace_back(i, n);
    content_order_.swap(live);
  }
  content_order_.emplace_back(ino, number);
  while (content_bytes_ > kContentBytes && !content_order_.empty()) {
    auto [oldest, n] = content_order_.front();
    content_order_.pop_front();
    auto c = contents_.find(oldest);
    if (c != contents_.end() && c->second.number == n) drop_content_locked(oldest);
  }
}

std::shared_ptr<const std::string> CachePolicy::whole_content(InodeNumber ino) const {
  if (!healthy() || !servers_watched_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(mu_);
  auto c = contents_.find(ino);
  auto k = known_.find(ino);
  if (c == contents_.end() || k == known_.end() || !k->second.file_attrs) return nullptr;
  const FileAttr& now = *k->second.file_attrs;
  if (now.mtime_ns != c->second.mtime_ns || now.size != c->second.data->size()) return nullptr;
  return c->second.data;
}

void CachePolicy::drop_content_locked(InodeNumber ino) {
  auto c = contents_.find(ino);
  if (c == contents_.end()) return;
  content_bytes_ -= c->second.data->size();
  contents_.erase(c);
  if (contents_.empty()) content_order_.clear();
}

uint64_t CachePolicy::read_whole_in(InodeNumber dir) {
  if (!options_.read_ahead_dirs || !options_.deferred_open) return 0;
  std::lock_guard lock(mu_);
  // Under the lock: a change of either state drops every read-ahead under it too.
  if (!healthy() || !servers_watched() || ahead_.count(dir))
    return 0;  // being read ahead, or read ahead and still held
  Known& k = known_[dir];
  if (k.sent && k.sent_size > kAheadDirSize) return 0;
  if (++k.whole_reads < kAheadAfter) return 0;
  k.whole_reads = 0;
  const uint64_t number = ++aheads_made_;
  ahead_[dir].number = number;
  if (ahead_order_.size() >= 8 * kAheadDirs) {  // mostly directories dropped since: forget them
    std::deque<std::pair<InodeNumber, uint64_t>> live;
    for (const auto& [d, n] : ahead_order_)
      if (auto a = ahead_.find(d); a != ahead_.end() && a->second.number == n)
        live.emplace_back(d, n);
    ahead_order_.swap(live);
  }
  ahead_order_.emplace_back(dir, number);
  while (ahead_.size() > kAheadDirs && !ahead_order_.empty()) {
    auto [oldest, n] = ahead_order_.front();
    ahead_order_.pop_front();
    auto a = ahead_.find(oldest);
    if (a != ahead_.end() && a->second.number == n) ahead_.erase(a);
  }
  wake_ahead_waiters_locked();
  return number;
}

void CachePolicy::ahead_listed(InodeNumber dir, uint64_t number,
                               std::vector<std::pair<std::string, FileAttr>> entries) {
  std::lock_guard lock(mu_);
  auto a = ahead_.find(dir);
  if (a == ahead_.end() || a->second.number != number || a->second.listed) return;
  a->second.listed = true;
  if (entries.size() > kAheadNames) entries.resize(kAheadNames);
  for (auto& [name, attr] : entries) {
    // Not a name the kernel got meanwhile, nor a directory (the listing made this mount one of
    // those that cache this directory, not its subdirectories), nor an entry without a type.
    if (a->second.given.count(name) || S_ISDIR(attr.mode) || (attr.mode & S_IFMT) == 0) continue;
    a->second.names.emplace(std::move(name), Ahead{attr, nullptr});
  }
  a->second.given.clear();
  wake_ahead_waiters_locked();
}

bool CachePolicy::ahead_alive(InodeNumber dir, uint64_t number) const {
  std::lock_guard lock(mu_);
  auto a = ahead_.find(dir);
  return a != ahead_.end() && a->second.number == number;
}

void CachePolicy::ahead_failed(InodeNumber dir, uint64_t number) {
  std::lock_guard lock(mu_);
  auto a = ahead_.find(dir);
  if (a != ahead_.end() && a->second.number == number && !a->second.listed) ahead_.erase(a);
  wake_ahead_waiters_locked();
}

void CachePolicy::ahead_content(InodeNumber dir, uint64_t number, const std::string& name,
                                const FileAttr& attr, std::string data) {
  if (data.size() != attr.size || !S_ISREG(attr.mode)) return;  // changed while being read
  std::lock_guard lock(mu_);
  auto a = ahead_.find(dir);
  if (a == ahead_.end() || a->second.number != number) return;
  auto n = a->second.names.find(name);
  if (n == a->second.names.end() || n->second.content) return;
  if (a->second.bytes + data.size() > kAheadBytes) return;
  a->second.bytes += data.size();
  ++ahead_contents_;
  n->second = Ahead{attr, std::make_shared<const std::string>(std::move(data))};
}

std::optional<CachePolicy::Ahead> CachePolicy::take_ahead(InodeNumber dir, std::string_view name) {
  if (!healthy() || !servers_watched()) return std::nullopt;
  std::unique_lock lock(mu_);
  auto a = ahead_.find(dir);
  if (a == ahead_.end()) return std::nullopt;
  if (!a->second.listed) {
    if (!wait_for_listing_locked(lock, dir)) return std::nullopt;
    a = ahead_.find(dir);
  }
  auto taken = take_ahead_name_locked(a->second, name);
  if (taken) ++aheads_taken_;
  return taken;
}

bool CachePolicy::wait_for_listing_locked(std::unique_lock<std::mutex>& lock, InodeNumber dir) {
  AheadDir& waited = ahead_.at(dir);
  if (waited.waited_out || applying_ != 0 || options_.ahead_listing_wait <= 0) return false;
  const uint64_t number = waited.number;
  const uint64_t state = state_.load();
  ++ahead_waits_;
  ahead_waiters_.fetch_add(1);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(options_.ahead_listing_wait));
  enum { kWaiting, kListed, kGone, kChanged } outcome = kWaiting;
  ahead_cv_.wait_until(lock, deadline, [&] {
    auto a = ahead_.find(dir);
    if (a == ahead_.end() || a->second.number != number)
      outcome = kGone;
    else if (a->second.listed)
      outcome = kListed;
    else if (state_.load() != state || applying_ != 0)
      outcome = kChanged;
    return outcome != kWaiting;
  });
  ahead_waiters_.fetch_sub(1);
  if (outcome == kWaiting) ahead_.at(dir).waited_out = true;  // ran out: still this read-ahead
  return outcome == kListed;
}

std::optional<CachePolicy::Ahead> CachePolicy::take_ahead_name_locked(AheadDir& dir,
                                                                      std::string_view name) {
  auto n = dir.names.find(std::string(name));
  if (n == dir.names.end()) return std::nullopt;
  Ahead taken = std::move(n->second);
  if (taken.content) dir.bytes -= taken.content->size();
  dir.names.erase(n);
  return taken;
}

CachePolicy::AheadCounts CachePolicy::ahead_counts() const {
  std::lock_guard lock(mu_);
  return {aheads_made_, aheads_taken_, ahead_contents_, ahead_waits_};
}

void CachePolicy::drop_ahead_name_locked(InodeNumber dir, std::string_view name) {
  auto a = ahead_.find(dir);
  if (a == ahead_.end()) return;
  if (!a->second.listed) {  // its listing is on its way: it must not bring this name
    a->second.given.emplace(name);
    return;
  }
  (void)take_ahead_name_locked(a->second, name);
}

void CachePolicy::ahead_changed(InodeNumber dir) {
  std::lock_guard lock(mu_);
  drop_ahead_locked(dir);
}

void CachePolicy::drop_ahead_name(InodeNumber dir, std::string_view name) {
  std::lock_guard lock(mu_);
  drop_ahead_name_locked(dir, name);
}

void CachePolicy::fetched_whole(InodeNumber ino, const Ahead& ahead, Ticket t) {
  if (!options_.deferred_open || !S_ISREG(ahead.attr.mode)) return;
  std::lock_guard lock(mu_);
  if (!healthy_throughout(state_.load(std::memory_order_acquire), t) || !servers_watched()) return;
  Known& k = known_[ino];
  if (k.writes != 0) return;  // written here since the kernel got it
  k.file_attrs = ahead.attr;
  if (ahead.content) keep_content_locked(ino, ahead.attr, *ahead.content);
}

uint64_t CachePolicy::names_changes(InodeNumber dir) const {
  std::lock_guard lock(mu_);
  auto it = known_.find(dir);
  return it == known_.end() ? 0 : it->second.name_changes;
}

void CachePolicy::names_known(InodeNumber dir, Ticket t, uint64_t changes,
                              const std::vector<std::string_view>& names) {
  if (!knowing_names()) return;
  std::lock_guard lock(mu_);
  if (!may_learn_names_locked(dir)) return;
  const uint64_t now = state_.load(std::memory_order_acquire);
  if (!healthy_throughout(now, t)) return;
  auto found = known_.find(dir);
  // A change of ours in it since the listing was asked for may be missing from it. (The entry
  // is only ever erased together with its names, by an invalidation, which the ticket sees.)
  if ((found == known_.end() ? 0 : found->second.name_changes) != changes) return;
  Known& k = known_[dir];
  k.misses = 0;
  auto& kept = k.names;
  kept.emplace();
  for (std::string_view n : names) kept->emplace(n);
}

bool CachePolicy::may_learn_names_locked(InodeNumber dir) const {
  return options_.know_names != Options::KnowNames::kMadeDirs || made_dirs_.count(dir) != 0;
}

void CachePolicy::made_dir(InodeNumber dir, const std::string& path, Ticket t) {
  if (options_.know_names == Options::KnowNames::kNever) return;
  std::lock_guard lock(mu_);
  made_dirs_.insert(dir);
  if (made_paths_.size() >= kMadePaths) made_paths_.clear();
  made_paths_.insert(path);
  if (!knowing_names() || !healthy_throughout(state_.load(std::memory_order_acquire), t)) return;
  Known& k = known_[dir];
  k.misses = 0;
  k.names.emplace();
}

void CachePolicy::entry_added(InodeNumber ino, const std::string& path, const FileAttr& attr) {
  if (options_.know_names == Options::KnowNames::kNever || !S_ISDIR(attr.mode)) return;
  std::lock_guard lock(mu_);
  if (made_paths_.count(path)) made_dirs_.insert(ino);
}

void CachePolicy::forget_made_at_or_below_locked(const std::string& path) {
  made_paths_.erase(made_paths_.lower_bound(path + '/'),
                    made_paths_.lower_bound(path + char('/' + 1)));
  made_paths_.erase(path);
}

void CachePolicy::dir_removed(const std::string& path) {
  std::lock_guard lock(mu_);
  forget_made_at_or_below_locked(path);
}

void CachePolicy::dir_renamed(const std::string& from, const std::string& to) {
  std::lock_guard lock(mu_);
  const bool made = made_paths_.count(from) != 0;
  forget_made_at_or_below_locked(from);
  made_paths_.erase(to);
  if (made) made_paths_.insert(to);
}

void CachePolicy::name_added(InodeNumber dir, std::string_view name) {
  std::lock_guard lock(mu_);
  drop_ahead_locked(dir);  // a read-ahead that listed it before the change ended
  Known& k = known_[dir];
  ++k.name_changes;
  if (k.names) k.names->emplace(name);
}

void CachePolicy::name_removed(InodeNumber dir, std::string_view name) {
  std::lock_guard lock(mu_);
  drop_ahead_locked(dir);  // a read-ahead that listed it before the change ended
  Known& k = known_[dir];
  ++k.name_changes;
  if (!k.names) return;
  auto at = k.names->find(name);
  if (at != k.names->end()) k.names->erase(at);
}

void CachePolicy::names_unknown(InodeNumber dir) {
  std::lock_guard lock(mu_);
  drop_ahead_locked(dir);
  Known& k = known_[dir];
  ++k.name_changes;
  k.names.reset();
}

bool CachePolicy::missed(InodeNumber dir) {
  constexpr uint32_t kMissesBeforeListing = 2;
  if (!knowing_names() || !healthy()) return false;
  std::lock_guard lock(mu_);
  if (!may_learn_names_locked(dir)) return false;
  Known& k = known_[dir];
  if (k.names || ++k.misses < kMissesBeforeListing) return false;
  k.misses = 0;  // a listing that is not recorded is tried again only after as many misses
  return true;
}

bool CachePolicy::knowing_names() const {
  using K = Options::KnowNames;
  return options_.know_names == K::kAlways ||
         ((options_.know_names == K::kWhileWatched || options_.know_names == K::kMadeDirs) &&
          servers_watched());
}

bool CachePolicy::known_absent(InodeNumber dir, std::string_view name) const {
  if (!healthy() || !knowing_names()) return false;
  std::lock_guard lock(mu_);
  auto it = known_.find(dir);
  return it != known_.end() && it->second.names && !it->second.names->count(name);
}

void CachePolicy::replaced(InodeNumber ino) {
  std::lock_guard lock(mu_);
  ++replaced_[ino];
}

uint64_t CachePolicy::replacements(InodeNumber ino) const {
  std::lock_guard lock(mu_);
  auto it = replaced_.find(ino);
  return it == replaced_.end() ? 0 : it->second;
}

void CachePolicy::forget(InodeNumber ino) {
  std::lock_guard lock(mu_);
  known_.erase(ino);
  replaced_.erase(ino);
  made_dirs_.erase(ino);
  drop_content_locked(ino);
  drop_ahead_locked(ino);
}

void CachePolicy::bump() {
  state_.fetch_add(2);  // sequentially consistent with ahead_waiters_ (see there)
  if (ahead_waiters_.load() != 0) {
    std::lock_guard lock(mu_);  // a waiter is either not yet past its check or in its wait
    ahead_cv_.notify_all();
  }
}

void CachePolicy::bump_all_locked() {
  all_invalidated_ = state_.fetch_add(2, std::memory_order_acq_rel) + 2;
  wake_ahead_waiters_locked();
}

bool CachePolicy::open_unspoilt(uint64_t now, Ticket t, InodeNumber ino) const {
  if (healthy_throughout(now, t)) return true;
  if ((now & 1) == 0 || (t.word_ & 1) == 0) return false;
  if (all_invalidated_ > t.word_ || invalidated_floor_ > t.word_) return false;
  for (const Invalidated& i : invalidated_) {
    if (i.ino == ino && i.epoch > t.word_) return false;
  }
  return true;
}

void CachePolicy::invalidating() { bump(); }

CachePolicy::Applying::Applying(CachePolicy& policy) : policy_(policy) {
  std::lock_guard lock(policy_.mu_);
  ++policy_.applying_;
  policy_.wake_ahead_waiters_locked();
}

CachePolicy::Applying::~Applying() {
  std::lock_guard lock(policy_.mu_);
  --policy_.applying_;
}

void CachePolicy::invalidating_locked(InodeNumber ino) {
  Invalidated& slot = invalidated_[invalidated_next_];
  invalidated_floor_ = std::max(invalidated_floor_, slot.epoch);
  slot = Invalidated{state_.fetch_add(2, std::memory_order_acq_rel) + 2, ino};
  invalidated_next_ = (invalidated_next_ + 1) % invalidated_.size();
  wake_ahead_waiters_locked();
  known_.erase(ino);
  drop_content_locked(ino);
}

void CachePolicy::invalidating(InodeNumber ino) {
  std::lock_guard lock(mu_);
  invalidating_locked(ino);
  drop_ahead_locked(ino);
}

void CachePolicy::invalidating_entry(InodeNumber dir, std::string_view name) {
  std::lock_guard lock(mu_);
  invalidating_locked(dir);
  drop_ahead_name_locked(dir, name);
}

void CachePolicy::invalidating_all() {
  std::lock_guard lock(mu_);
  bump_all_locked();
  drop_all_ahead_locked();
  known_.clear();
  contents_.clear();
  content_order_.clear();
  content_bytes_ = 0;
}

void CachePolicy::set_servers_watched(bool watched) {
  if (servers_watched_.exchange(watched, std::memory_order_acq_rel) == watched) return;
  if (!watched) {
    std::lock_guard lock(mu_);
    drop_all_ahead_locked();
    return;
  }
  // What was fetched while a server's change could go unreported may be out of date: neither it
  // nor a reply on its way now is current.
  const bool keep_names = options_.know_names == Options::KnowNames::kAlways;
  std::lock_guard lock(mu_);
  bump_all_locked();
  drop_all_ahead_locked();  // one begun while the state was changing
  for (auto& [ino, k] : known_) {
    k.file_attrs.reset();
    if (!keep_names) k.names.reset();
  }
}

void CachePolicy::set_healthy(bool healthy) {
  if (!healthy) servers_watched_.store(false, std::memory_order_release);
  std::lock_guard lock(mu_);
  drop_all_ahead_locked();
  uint64_t old = state_.load(std::memory_order_acquire);
  uint64_t next;
  do {
    next = ((old | 1) + 2) - (healthy ? 0 : 1);
  } while (!state_.compare_exchange_weak(old, next, std::memory_order_acq_rel));
  all_invalidated_ = next;
  wake_ahead_waiters_locked();
}

}  // namespace skein::client
