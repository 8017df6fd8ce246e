// Tags that let a mount store into its page cache bytes another mount fetched, for a caller who
// is not privileged (docs/mpi.md, "Security"). The fetching mount signs the bytes it got from the
// gateway with a key every mount of the namespace holds and no user does (derived from the
// namespace's token); the storing mount stores them only if the tag it computes over the bytes
// the caller hands it is the same. A tag binds the bytes to the file's path, version (mtime, size)
// and range, so bytes are stored only where a mount of the namespace read them from the gateway.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace skein::client {

class FillTag {
 public:
  using Key = std::array<unsigned char, 32>;
  // The key for the namespace whose token is `token`.
  static Key key_for_token(std::string_view token);

  // A tag over one range: feed the range's bytes in order, then hex().
  FillTag(const Key& key, const std::string& ns_path, int64_t mtime_ns, uint64_t size,
          uint64_t offset, uint64_t length);
  ~FillTag();
  FillTag(const FillTag&) = delete;
  FillTag& operator=(const FillTag&) = delete;
  void add(const char* data, std::size_t n);
  // 64 hex digits (HMAC-SHA256).
  std::string hex();

 private:
  void* ctx_ = nullptr;  // EVP_MAC_CTX
};

// Whether two tags are the same, in time that does not depend on where they differ.
bool same_tag(std::string_view a, std::string_view b);

}  // namespace skein::client
