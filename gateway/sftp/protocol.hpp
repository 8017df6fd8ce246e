// SFTP version 3 (draft-ietf-secsh-filexfer-02) as OpenSSH speaks it: packet types, flags, status
// codes, attribute records, and a codec for building requests and parsing replies. Pure logic,
// no I/O, so it is unit-tested on its own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace skein::sftp {

enum PacketType : uint8_t {
  FXP_INIT = 1,
  FXP_VERSION = 2,
  FXP_OPEN = 3,
  FXP_CLOSE = 4,
  FXP_READ = 5,
  FXP_WRITE = 6,
  FXP_LSTAT = 7,
  FXP_FSTAT = 8,
  FXP_SETSTAT = 9,
  FXP_FSETSTAT = 10,
  FXP_OPENDIR = 11,
  FXP_READDIR = 12,
  FXP_REMOVE = 13,
  FXP_MKDIR = 14,
  FXP_RMDIR = 15,
  FXP_REALPATH = 16,
  FXP_STAT = 17,
  FXP_RENAME = 18,
  FXP_READLINK = 19,
  FXP_SYMLINK = 20,
  FXP_STATUS = 101,
  FXP_HANDLE = 102,
  FXP_DATA = 103,
  FXP_NAME = 104,
  FXP_ATTRS = 105,
  FXP_EXTENDED = 200,
  FXP_EXTENDED_REPLY = 201,
};

enum StatusCode : uint32_t {
  FX_OK = 0,
  FX_EOF = 1,
  FX_NO_SUCH_FILE = 2,
  FX_PERMISSION_DENIED = 3,
  FX_FAILURE = 4,
  FX_BAD_MESSAGE = 5,
  FX_NO_CONNECTION = 6,
  FX_CONNECTION_LOST = 7,
  FX_OP_UNSUPPORTED = 8,
};

enum AttrFlags : uint32_t {
  ATTR_SIZE = 0x1,
  ATTR_UIDGID = 0x2,
  ATTR_PERMISSIONS = 0x4,
  ATTR_ACMODTIME = 0x8,
  ATTR_EXTENDED = 0x80000000,
};

enum OpenFlags : uint32_t {
  FXF_READ = 0x1,
  FXF_WRITE = 0x2,
  FXF_APPEND = 0x4,
  FXF_CREAT = 0x8,
  FXF_TRUNC = 0x10,
  FXF_EXCL = 0x20,
};

// An SFTP attribute record. Only the fields whose flag is set are meaningful.
struct Attrs {
  uint32_t flags = 0;
  uint64_t size = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t permissions = 0;  // includes the S_IFMT type bits
  uint32_t atime = 0;
  uint32_t mtime = 0;
};

struct NameEntry {
  std::string filename;
  std::string longname;
  Attrs attrs;
};

struct StatVfs {
  uint64_t bsize = 0, frsize = 0, blocks = 0, bfree = 0, bavail = 0, files = 0, ffree = 0,
           favail = 0, fsid = 0, flag = 0, namemax = 0;
};

struct Limits {
  uint64_t max_packet = 0, max_read = 0, max_write = 0, max_handles = 0;
};

// A request ready to send: its framed packet, except that the bytes of its last field may be left
// out of it and sent from the caller's buffers (`tail`, in order), which must then stay valid
// until the request is answered.
struct Request {
  Request(std::string f) : framed(std::move(f)) {}  // NOLINT: a whole packet is a request
  Request(std::string f, std::vector<std::string_view> t)
      : framed(std::move(f)), tail(std::move(t)) {}
  uint8_t type() const { return framed.size() > 4 ? static_cast<uint8_t>(framed[4]) : 0; }
  size_t size() const {
    size_t n = framed.size();
    for (auto piece : tail) n += piece.size();
    return n;
  }
  std::string framed;
  std::vector<std::string_view> tail;
};

// Builds the body of one packet (everything after the 4-byte length); the request id, when the
// packet has one, is patched in by the connection that sends it.
class PacketWriter {
 public:
  // Starts a request of `type` with a placeholder request id.
  explicit PacketWriter(uint8_t type, bool with_id = true);
  PacketWriter& u8(uint8_t v);
  PacketWriter& u32(uint32_t v);
  PacketWriter& u64(uint64_t v);
  PacketWriter& str(std::string_view s);
  PacketWriter& attrs(const Attrs& a);
  // The framed packet: length prefix, type, id placeholder, fields.
  std::string take();
  // The request whose last field is a string, given in pieces that are sent one after the other
  // from where they are rather than copied (a WRITE's data): they must stay valid until the
  // request is answered.
  Request take_with_str(std::vector<std::string_view> pieces);

 private:
  std::string buf_;
};

// Sets the request id of a framed packet produced by PacketWriter.
void patch_request_id(std::string& framed, uint32_t id);

// Reads fields from a reply body; every getter fails (returns nullopt) on truncation.
class PacketReader {
 public:
  explicit PacketReader(std::string_view body) : data_(body) {}
  std::optional<uint8_t> u8();
  std::optional<uint32_t> u32();
  std::optional<uint64_t> u64();
  std::optional<std::string_view> str();
  std::optional<Attrs> attrs();
  size_t remaining() const { return data_.size() - pos_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

// Bytes allocated once at their final size and filled in place (not zeroed first).
class Body {
 public:
  Body() = default;
  explicit Body(size_t n);
  explicit Body(std::string_view s);
  char* data() { return data_.get(); }
  const char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  operator std::string_view() const { return {data_.get(), size_}; }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
};

// One reply as received: its type and its body after the request id.
struct Reply {
  uint8_t type = 0;
  Body body;
};

// Cuts the byte stream of a channel into replies, with as few copies as it can: small replies
// are read into a staging buffer and copied out whole; the rest of a large one (a READ's data)
// is read straight into its own body. Use: read at most want().size() bytes into want().data(),
// report them with got(), then take() replies until it returns false.
class PacketAssembler {
 public:
  PacketAssembler();
  struct Space {
    char* data;
    size_t size;
  };
  Space want();
  void got(size_t n);
  // The next whole reply, if there is one. Sets `bad` when the stream is malformed (length 0 or
  // over the limit); nothing can be taken after that.
  bool take(Reply& reply, uint32_t& id, bool& bad);

 private:
  static constexpr size_t kStage = 64 * 1024;
  // A reply larger than this is read into its own body; smaller ones always fit the stage.
  static constexpr size_t kDirect = 16 * 1024;
  std::unique_ptr<char[]> stage_;
  size_t begin_ = 0, end_ = 0;  // unconsumed staged bytes
  // The large reply being filled, if any.
  bool filling_ = false;
  Reply big_;
  uint32_t big_id_ = 0;
  size_t big_filled_ = 0;
};

// Maps an SFTP status code to a POSIX errno (0 for FX_OK). FX_FAILURE has no single meaning in
// OpenSSH (it is every errno it cannot name), so callers refine it where they can.
int status_to_errno(uint32_t code);

// open(2) flags to SFTP pflags.
uint32_t open_flags_to_pflags(int flags);

}  // namespace skein::sftp
