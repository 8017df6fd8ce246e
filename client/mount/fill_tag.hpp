// Tags that let a mount store into its page cache bytes another mount fetched, for a caller who
// is not privileged (docs/mpi.md, "Security"). The fetching mount signs the bytes it got from the
// gateway with a key every mount of the namespace holds and no user does (derived from the
// namespace's name and token); the storing mount stores them only if the tag it computes over the
// bytes the caller hands it is the same. A tag binds the bytes to the file's path, version (mtime,
// size) and range, and to when it was made, so bytes are stored only where a mount of the
// namespace read them from the gateway, and only for kMaxAge after.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace skein::client {

class FillTag {
 public:
  using Key = std::array<unsigned char, 32>;
  // The key for namespace `ns`, whose token is `token`.
  static Key key_for(std::string_view ns, std::string_view token);
  // How long a tag is taken after it was made (clocks of nodes may differ by up to this, too).
  static constexpr std::chrono::seconds kMaxAge{600};
  // A tag tells a file's versions apart only when it was made at least this long after the
  // second of the file's mtime began. A version is (mtime, size), and SFTP servers keep mtimes to
  // the second, so a rewrite of the same size within that second is the same version; bytes
  // fetched after that second has ended are its last. The second second covers clocks of the
  // servers and the nodes that differ by up to one. (As with Git's "racily clean" index entries.)
  static constexpr std::chrono::seconds kSettled{2};
  // The Unix second from which a tag tells the version of mtime `mtime_ns` apart from later ones.
  static int64_t settled_from(int64_t mtime_ns);
  // Whether a tag made at `made` (Unix seconds) does.
  static bool settled(int64_t made, int64_t mtime_ns) { return made >= settled_from(mtime_ns); }
  // How a `fill store` that does not take the tag it was handed begins its answer's error. The
  // bytes are then not stored; the caller may fetch them itself (`fill fetch`) instead.
  static constexpr std::string_view kRefused = "fill store: tag refused: ";
  // A tag's length: the time it was made (10 decimal digits of Unix seconds), '.', 64 hex digits.
  static constexpr std::size_t kSize = 75;

  // A tag over one range, made at `made` (Unix seconds): feed the range's bytes in order, then
  // tag().
  FillTag(const Key& key, const std::string& ns_path, int64_t mtime_ns, uint64_t size,
          uint64_t offset, uint64_t length, int64_t made);
  // When `tag` says it was made, if it is well formed.
  static std::optional<int64_t> made_of(std::string_view tag);
  ~FillTag();
  FillTag(const FillTag&) = delete;
  FillTag& operator=(const FillTag&) = delete;
  void add(const char* data, std::size_t n);
  // The tag: when it was made, then the HMAC-SHA256 in hex.
  std::string tag();

 private:
  void* ctx_ = nullptr;  // EVP_MAC_CTX
  int64_t made_ = 0;
};

// Whether two tags are the same, in time that does not depend on where they differ.
bool same_tag(std::string_view a, std::string_view b);

}  // namespace skein::client
