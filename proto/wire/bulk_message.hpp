// Data messages that carry file contents (ReadReply.data, WriteRequest.data), framed and parsed
// by hand around protobuf, so that neither gRPC nor protobuf copies the contents: a message sent
// is the small rest of it, serialized by protobuf, followed by the contents as a slice of their
// own buffer; a message received is split into the rest, parsed by protobuf, and the contents as
// views of the received slices. Both are the standard protobuf encoding: the other side may use
// generated code as usual.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <string>

#include "skein/shared_bytes.hpp"

namespace google::protobuf {
class MessageLite;
}

namespace skein::wire {

// `head` (whose field `field` must be empty) followed by field `field`, of type bytes, holding
// `data`. gRPC sends `data` from the buffer itself, which it frees when it is done.
grpc::ByteBuffer serialize_with_bytes(const google::protobuf::MessageLite& head, int field,
                                      std::string data);
// The same with `data` in pieces: gRPC sends each from where it is, and the slices keep the
// pieces' owner alive until it is done.
grpc::ByteBuffer serialize_with_bytes(const google::protobuf::MessageLite& head, int field,
                                      const SharedBytes& data);

// Splits a received message: field `field` (of type bytes) goes to `bytes`, as views of the
// message's own slices (the last occurrence, as protobuf would); everything else is parsed into
// `head`. False if the message is malformed.
bool parse_with_bytes(const grpc::ByteBuffer& message, int field,
                      google::protobuf::MessageLite& head, SharedBytes& bytes);

}  // namespace skein::wire
