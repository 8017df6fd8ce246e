// The SSH data types of RFC 4251 section 5 (byte, boolean, uint32, uint64, string, mpint,
// name-list): a writer that appends them to a buffer and a reader whose getters fail on
// truncation. Pure logic, unit-tested on its own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace skein::ssh {

class Writer {
 public:
  Writer() = default;
  explicit Writer(uint8_t message) { byte(message); }
  Writer& byte(uint8_t v);
  Writer& boolean(bool v) { return byte(v ? 1 : 0); }
  Writer& u32(uint32_t v);
  Writer& u64(uint64_t v);
  Writer& str(std::string_view s);
  // An unsigned integer given as big-endian magnitude bytes (leading zeros allowed), encoded as
  // the shortest mpint: no leading zero bytes except one that keeps the sign bit clear.
  Writer& mpint(std::string_view magnitude);
  Writer& raw(std::string_view s);
  const std::string& data() const { return buf_; }
  std::string take() { return std::move(buf_); }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool byte(uint8_t& v);
  bool boolean(bool& v);
  bool u32(uint32_t& v);
  bool u64(uint64_t& v);
  bool str(std::string_view& s);
  // A non-negative mpint's magnitude, without its leading zero bytes. Negative values fail.
  bool mpint(std::string_view& magnitude);
  size_t remaining() const { return data_.size() - pos_; }
  std::string_view rest() const { return data_.substr(pos_); }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

void put_u32(char* at, uint32_t v);
uint32_t get_u32(const char* at);

// "a,b,c" as {"a", "b", "c"}; the empty list as {}.
std::vector<std::string_view> split_name_list(std::string_view list);
// The first name of `ours` (in our order of preference) that `theirs` also has; empty if none.
std::string_view first_common(std::string_view ours, std::string_view theirs);

std::string base64_decode(std::string_view text, bool& ok);
std::string base64_encode(std::string_view bytes);

}  // namespace skein::ssh
