// Result<T>: a value or a positive POSIX errno. The filesystem layers return these so that each
// layer can be tested without a kernel or a network, and the outermost layer picks one reply.
#pragma once

#include <cassert>
#include <optional>
#include <utility>

namespace skein {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  static Result failure(int err) {
    assert(err > 0);
    return Result(err);
  }

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  int error() const { return error_; }

  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T take() { return std::move(*value_); }

 private:
  explicit Result(int err) : error_(err) {}
  std::optional<T> value_;
  int error_ = 0;
};

// Result of an operation that yields nothing: 0 or a positive errno.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status failure(int err) { return Status(err); }
  bool ok() const { return error_ == 0; }
  explicit operator bool() const { return ok(); }
  int error() const { return error_; }

 private:
  explicit Status(int err) : error_(err) {}
  int error_ = 0;
};

inline Status ok_status() { return Status(); }

}  // namespace skein
