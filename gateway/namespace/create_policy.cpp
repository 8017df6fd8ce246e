// The create policies; see create_policy.hpp.
#include "namespace/create_policy.hpp"

#include <mutex>
#include <random>

namespace skein {
namespace {

class FirstFound final : public CreatePolicy {
 public:
  std::string_view name() const override { return "ff"; }
  size_t pick(const std::vector<const Branch*>&, std::string_view) override { return 0; }
};

class MostFreeSpace final : public CreatePolicy {
 public:
  std::string_view name() const override { return "mfs"; }
  size_t pick(const std::vector<const Branch*>& c, std::string_view) override {
    size_t best = 0;
    unsigned long long best_free = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      auto v = c[i]->backend->free_space();
      if (!v) continue;
      unsigned long long free = v->bavail * (v->frsize ? v->frsize : v->bsize);
      if (free > best_free) {
        best = i;
        best_free = free;
      }
    }
    return best;
  }
};

class Random final : public CreatePolicy {
 public:
  std::string_view name() const override { return "rand"; }
  size_t pick(const std::vector<const Branch*>& c, std::string_view) override {
    std::lock_guard lock(mu_);
    return std::uniform_int_distribution<size_t>(0, c.size() - 1)(rng_);
  }

 private:
  std::mutex mu_;
  std::mt19937_64 rng_{std::random_device{}()};
};

class HashOfPath final : public CreatePolicy {
 public:
  std::string_view name() const override { return "hash"; }
  size_t pick(const std::vector<const Branch*>& c, std::string_view rel) override {
    uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across runs and machines
    for (unsigned char ch : rel) {
      h ^= ch;
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h % c.size());
  }
};

}  // namespace

std::shared_ptr<CreatePolicy> make_create_policy(std::string_view name) {
  if (name == "ff" || name == "first-found") return std::make_shared<FirstFound>();
  if (name == "mfs" || name == "most-free-space") return std::make_shared<MostFreeSpace>();
  if (name == "rand" || name == "random") return std::make_shared<Random>();
  if (name == "hash" || name == "hash-of-path") return std::make_shared<HashOfPath>();
  return nullptr;
}

std::string create_policy_names() {
  return "ff (first-found), mfs (most-free-space), rand (random), hash (hash-of-path)";
}

std::optional<BranchMode> parse_branch_mode(std::string_view text) {
  std::string t(text);
  for (auto& c : t) c = static_cast<char>(toupper(c));
  if (t == "RW") return BranchMode::read_write;
  if (t == "RO") return BranchMode::read_only;
  if (t == "NC") return BranchMode::no_create;
  return std::nullopt;
}

std::string_view branch_mode_name(BranchMode mode) {
  switch (mode) {
    case BranchMode::read_write:
      return "RW";
    case BranchMode::read_only:
      return "RO";
    case BranchMode::no_create:
      return "NC";
  }
  return "?";
}

}  // namespace skein
