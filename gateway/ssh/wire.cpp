// SSH wire types; see wire.hpp.
#include "ssh/wire.hpp"

#include <openssl/evp.h>

#include <cstring>

namespace skein::ssh {

void put_u32(char* at, uint32_t v) {
  const char c[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  std::memcpy(at, c, 4);
}

uint32_t get_u32(const char* at) {
  auto u = reinterpret_cast<const unsigned char*>(at);
  return uint32_t(u[0]) << 24 | uint32_t(u[1]) << 16 | uint32_t(u[2]) << 8 | uint32_t(u[3]);
}

Writer& Writer::byte(uint8_t v) {
  buf_.push_back(char(v));
  return *this;
}

Writer& Writer::u32(uint32_t v) {
  buf_.append(4, '\0');
  put_u32(buf_.data() + buf_.size() - 4, v);
  return *this;
}

Writer& Writer::u64(uint64_t v) { return u32(uint32_t(v >> 32)).u32(uint32_t(v)); }

Writer& Writer::str(std::string_view s) {
  u32(uint32_t(s.size()));
  buf_.append(s);
  return *this;
}

Writer& Writer::mpint(std::string_view m) {
  while (!m.empty() && m.front() == '\0') m.remove_prefix(1);
  const bool pad = !m.empty() && (uint8_t(m.front()) & 0x80);
  u32(uint32_t(m.size() + (pad ? 1 : 0)));
  if (pad) buf_.push_back('\0');
  buf_.append(m);
  return *this;
}

Writer& Writer::raw(std::string_view s) {
  buf_.append(s);
  return *this;
}

bool Reader::byte(uint8_t& v) {
  if (remaining() < 1) return false;
  v = uint8_t(data_[pos_++]);
  return true;
}

bool Reader::boolean(bool& v) {
  uint8_t b;
  if (!byte(b)) return false;
  v = b != 0;
  return true;
}

bool Reader::u32(uint32_t& v) {
  if (remaining() < 4) return false;
  v = get_u32(data_.data() + pos_);
  pos_ += 4;
  return true;
}

bool Reader::u64(uint64_t& v) {
  uint32_t hi, lo;
  if (!u32(hi) || !u32(lo)) return false;
  v = uint64_t(hi) << 32 | lo;
  return true;
}

bool Reader::str(std::string_view& s) {
  uint32_t n;
  if (!u32(n) || remaining() < n) return false;
  s = data_.substr(pos_, n);
  pos_ += n;
  return true;
}

bool Reader::mpint(std::string_view& m) {
  if (!str(m)) return false;
  if (!m.empty() && (uint8_t(m.front()) & 0x80)) return false;  // negative
  while (!m.empty() && m.front() == '\0') m.remove_prefix(1);
  return true;
}

std::vector<std::string_view> split_name_list(std::string_view list) {
  std::vector<std::string_view> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    out.push_back(list.substr(0, comma));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

std::string_view first_common(std::string_view ours, std::string_view theirs) {
  const auto their_names = split_name_list(theirs);
  for (std::string_view name : split_name_list(ours)) {
    for (std::string_view t : their_names)
      if (t == name) return name;
  }
  return {};
}

std::string base64_decode(std::string_view text, bool& ok) {
  ok = false;
  std::string clean;
  clean.reserve(text.size());
  for (char c : text)
    if (c != '\n' && c != '\r' && c != ' ' && c != '\t') clean.push_back(c);
  if (clean.size() % 4 != 0) return {};
  std::string out(clean.size() / 4 * 3, '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(clean.data()), int(clean.size()));
  if (n < 0) return {};
  size_t len = size_t(n);
  // EVP_DecodeBlock counts the '=' padding as zero bytes.
  if (!clean.empty() && clean.back() == '=') --len;
  if (clean.size() >= 2 && clean[clean.size() - 2] == '=') --len;
  out.resize(len);
  ok = true;
  return out;
}

std::string base64_encode(std::string_view bytes) {
  std::string out((bytes.size() + 2) / 3 * 4 + 1, '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()), int(bytes.size()));
  out.resize(size_t(n));
  return out;
}

}  // namespace skein::ssh
