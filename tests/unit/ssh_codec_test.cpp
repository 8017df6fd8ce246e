// The SSH wire types (RFC 4251) and the binary packet protocol in the clear and under AES-GCM
// (RFC 4253, 5647 as OpenSSH frames it): framing, padding, tags, partial input, tampering.
// Interoperability with a real sshd is e2e.ssh_transport's.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ssh/packet_codec.hpp"
#include "ssh/wire.hpp"

namespace skein::ssh {
namespace {

std::string hex(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

std::string unhex(std::string_view h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(char(std::stoi(std::string(h.substr(i, 2)), nullptr, 16)));
  return out;
}

std::string random_string(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng());
  return s;
}

TEST(SshWire, MpintsAreEncodedAsRfc4251Section5Shows) {
  EXPECT_EQ(hex(Writer().mpint("").data()), "00000000");
  EXPECT_EQ(hex(Writer().mpint(unhex("09a378f9b2e332a7")).data()), "0000000809a378f9b2e332a7");
  EXPECT_EQ(hex(Writer().mpint(unhex("80")).data()), "000000020080");
  // Leading zero bytes of the magnitude are dropped.
  EXPECT_EQ(hex(Writer().mpint(unhex("000001")).data()), "0000000101");
  std::string_view m;
  Reader r(unhex("000000020080"));
  ASSERT_TRUE(r.mpint(m));
  EXPECT_EQ(hex(m), "80");
  Reader negative(unhex("00000001ff"));
  EXPECT_FALSE(negative.mpint(m));
}

TEST(SshWire, ReaderFailsOnTruncationInsteadOfReadingPastTheEnd) {
  const std::string s = Writer().u32(7).str("hello").boolean(true).take();
  Reader r(s);
  uint32_t v;
  std::string_view str;
  bool b;
  ASSERT_TRUE(r.u32(v) && r.str(str) && r.boolean(b));
  EXPECT_EQ(v, 7u);
  EXPECT_EQ(str, "hello");
  EXPECT_TRUE(b);
  EXPECT_FALSE(r.u32(v));
  Reader cut(std::string_view(s).substr(0, 8));  // the string's length says 5, 0 are there
  ASSERT_TRUE(cut.u32(v));
  EXPECT_FALSE(cut.str(str));
}

TEST(SshWire, NegotiationTakesTheClientsFirstChoiceTheServerHas) {
  EXPECT_EQ(first_common("a,b,c", "c,b"), "b");
  EXPECT_EQ(first_common("a,b", "x,y"), "");
  EXPECT_EQ(first_common("a", ""), "");
  EXPECT_EQ(split_name_list("").size(), 0u);
  EXPECT_EQ(split_name_list("x,y").size(), 2u);
}

TEST(SshWire, Base64RoundTripsAndRejectsGarbage) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    bool ok = false;
    EXPECT_EQ(base64_decode(base64_encode(s), ok), s);
    EXPECT_TRUE(ok);
  }
  bool ok = true;
  base64_decode("abc", ok);
  EXPECT_FALSE(ok);
}

// One packet of `head` (and `pieces`), as bytes the test may change.
std::string sealed(PacketSealer& sealer, std::string_view head,
                   std::span<const std::string_view> pieces = {}) {
  OutputBuffer out;
  EXPECT_TRUE(sealer.seal(out, head, pieces));
  return std::string(out.view());
}

// Seals `payloads` one after the other and opens the stream again in reads of `step` bytes.
std::vector<std::string> round_trip(PacketSealer& sealer, PacketOpener& opener,
                                    const std::vector<std::string>& payloads, size_t step,
                                    std::string* wire = nullptr) {
  OutputBuffer sealed_bytes;
  for (auto& p : payloads) EXPECT_TRUE(sealer.seal(sealed_bytes, p));
  const std::string stream(sealed_bytes.view());
  if (wire) *wire = stream;
  std::vector<std::string> out;
  std::string buf;
  size_t fed = 0;
  while (fed < stream.size() || !buf.empty()) {
    std::string_view payload;
    size_t consumed = 0;
    auto st = opener.open(buf.data(), buf.size(), payload, consumed);
    if (st == PacketOpener::Status::packet) {
      out.emplace_back(payload);
      buf.erase(0, consumed);
      continue;
    }
    EXPECT_EQ(st, PacketOpener::Status::need_more);
    if (st != PacketOpener::Status::need_more || fed == stream.size()) break;
    const size_t n = std::min(step, stream.size() - fed);
    buf.append(stream, fed, n);
    fed += n;
  }
  return out;
}

TEST(SshPackets, ClearPacketsArePaddedToEightBytesAndRoundTrip) {
  std::mt19937 rng(1);
  std::vector<std::string> payloads;
  for (size_t n : {1, 2, 7, 8, 100, 1000, 32768}) payloads.push_back(random_string(rng, n));
  PacketSealer sealer;
  PacketOpener opener;
  std::string wire;
  EXPECT_EQ(round_trip(sealer, opener, payloads, 3, &wire), payloads);
  // Every packet: length + 4 a multiple of 8, at least 4 bytes of padding.
  size_t at = 0;
  for (auto& p : payloads) {
    const uint32_t len = get_u32(wire.data() + at);
    EXPECT_EQ((len + 4) % 8, 0u);
    const uint8_t pad = uint8_t(wire[at + 4]);
    EXPECT_GE(pad, 4);
    EXPECT_EQ(len, 1 + p.size() + pad);
    at += 4 + len;
  }
  EXPECT_EQ(at, wire.size());
  EXPECT_EQ(sealer.sequence(), payloads.size());
  EXPECT_EQ(opener.sequence(), payloads.size());
}

TEST(SshPackets, GcmPacketsRoundTripAtAnyReadSize) {
  std::mt19937 rng(2);
  const std::string key = random_string(rng, 16), iv = random_string(rng, 12);
  std::vector<std::string> payloads;
  for (int i = 0; i < 50; ++i) payloads.push_back(random_string(rng, 1 + rng() % 40000));
  for (size_t step : {1, 17, 4096, 1 << 20}) {
    PacketSealer sealer;
    PacketOpener opener;
    ASSERT_TRUE(sealer.set_gcm(key, iv));
    ASSERT_TRUE(opener.set_gcm(key, iv));
    std::string wire;
    EXPECT_EQ(round_trip(sealer, opener, payloads, step, &wire), payloads) << "step " << step;
    // The length is in the clear and (length) a multiple of 16; each packet carries a tag.
    size_t at = 0;
    while (at < wire.size()) {
      const uint32_t len = get_u32(wire.data() + at);
      EXPECT_EQ(len % 16, 0u);
      at += 4 + len + 16;
    }
    EXPECT_EQ(at, wire.size());
  }
}

TEST(SshPackets, GcmWithA256BitKeyRoundTripsAndOtherKeySizesAreRefused) {
  std::mt19937 rng(3);
  const std::string key = random_string(rng, 32), iv = random_string(rng, 12);
  PacketSealer sealer;
  PacketOpener opener;
  ASSERT_TRUE(sealer.set_gcm(key, iv));
  ASSERT_TRUE(opener.set_gcm(key, iv));
  const std::vector<std::string> payloads = {"one", random_string(rng, 5000), "three"};
  EXPECT_EQ(round_trip(sealer, opener, payloads, 100), payloads);
  PacketSealer other;
  EXPECT_FALSE(other.set_gcm(std::string(24, 'k'), iv));
  EXPECT_FALSE(other.set_gcm(key, std::string(16, 'i')));
  EXPECT_FALSE(other.encrypted());
}

TEST(SshPackets, AWrongKeyFailsTheTag) {
  PacketSealer sealer;
  PacketOpener opener;
  ASSERT_TRUE(sealer.set_gcm(std::string(16, 'a'), std::string(12, 'n')));
  ASSERT_TRUE(opener.set_gcm(std::string(16, 'b'), std::string(12, 'n')));
  std::string wire = sealed(sealer, "secret");
  std::string_view payload;
  size_t consumed;
  EXPECT_EQ(opener.open(wire.data(), wire.size(), payload, consumed), PacketOpener::Status::bad);
}

TEST(SshPackets, SealingFromPiecesGivesTheSameBytesAsFromOneBuffer) {
  std::mt19937 rng(4);
  const std::string key = random_string(rng, 16), iv = random_string(rng, 12);
  const std::string head = random_string(rng, 9);
  const std::string data = random_string(rng, 100000);
  std::vector<std::string_view> pieces;
  for (size_t at = 0; at < data.size();) {
    const size_t n = std::min<size_t>(1 + rng() % 7000, data.size() - at);
    pieces.push_back(std::string_view(data).substr(at, n));
    at += n;
  }
  PacketSealer whole, in_pieces;
  ASSERT_TRUE(whole.set_gcm(key, iv));
  ASSERT_TRUE(in_pieces.set_gcm(key, iv));
  const std::string a = sealed(whole, head + data), b = sealed(in_pieces, head, pieces);
  EXPECT_EQ(a, b);
}

TEST(SshPackets, TheNoncesAdvanceSoEqualPayloadsEncryptDifferently) {
  PacketSealer sealer;
  ASSERT_TRUE(sealer.set_gcm(std::string(16, 'k'), std::string(12, 'n')));
  std::string a = sealed(sealer, "same payload"), b = sealed(sealer, "same payload");
  EXPECT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);
  // Out of order, the second packet does not open as the first.
  PacketOpener opener;
  ASSERT_TRUE(opener.set_gcm(std::string(16, 'k'), std::string(12, 'n')));
  std::string_view payload;
  size_t consumed;
  EXPECT_EQ(opener.open(b.data(), b.size(), payload, consumed), PacketOpener::Status::bad);
}

TEST(SshPackets, AnyFlippedBitIsRefused) {
  std::mt19937 rng(5);
  const std::string key = random_string(rng, 16), iv = random_string(rng, 12);
  PacketSealer sealer;
  ASSERT_TRUE(sealer.set_gcm(key, iv));
  std::string wire = sealed(sealer, random_string(rng, 300));
  for (size_t i = 0; i < wire.size(); ++i) {
    std::string bad = wire;
    bad[i] ^= 0x04;
    PacketOpener opener;
    ASSERT_TRUE(opener.set_gcm(key, iv));
    std::string_view payload;
    size_t consumed;
    auto st = opener.open(bad.data(), bad.size(), payload, consumed);
    // A changed length asks for more bytes or is refused; anything else fails the tag.
    EXPECT_NE(st, PacketOpener::Status::packet) << "byte " << i;
  }
}

TEST(SshPackets, ImpossibleLengthsAreRefusedBeforeWaitingForThem) {
  PacketOpener opener;
  std::string_view payload;
  size_t consumed;
  std::string huge = Writer().u32(uint32_t(kMaxPacket + 8)).raw(std::string(4, '\0')).take();
  EXPECT_EQ(opener.open(huge.data(), huge.size(), payload, consumed), PacketOpener::Status::bad);
  std::string tiny = Writer().u32(4).raw(std::string(4, '\0')).take();
  EXPECT_EQ(opener.open(tiny.data(), tiny.size(), payload, consumed), PacketOpener::Status::bad);
  std::string partial = Writer().u32(28).raw("\x04").take();
  EXPECT_EQ(opener.open(partial.data(), partial.size(), payload, consumed),
            PacketOpener::Status::need_more);
  EXPECT_EQ(consumed, 32u);  // tells how much it needs
}

// A CHANNEL_DATA packet: message 94, recipient channel, data.
std::string channel_data(std::string_view data) { return Writer(94).u32(0).str(data).take(); }

TEST(SshPackets, ChannelDataIsDecryptedStraightIntoTheTargetAsFarAsItHasRoom) {
  std::mt19937 rng(6);
  const std::string key = random_string(rng, 16), iv = random_string(rng, 12);
  const std::string data = random_string(rng, 30000);
  for (size_t room : {size_t(0), size_t(1), size_t(1000), size_t(30000), size_t(40000)}) {
    PacketSealer sealer;
    PacketOpener opener;
    ASSERT_TRUE(sealer.set_gcm(key, iv));
    ASSERT_TRUE(opener.set_gcm(key, iv));
    std::string wire = sealed(sealer, channel_data(data));
    std::string buffer(room, '\0');
    DataTarget target{buffer.data(), room, 0};
    std::string_view payload;
    size_t consumed;
    ASSERT_EQ(opener.open(wire.data(), wire.size(), payload, consumed, &target),
              PacketOpener::Status::packet);
    const size_t direct = std::min(room, data.size());
    EXPECT_EQ(target.delivered, direct) << "room " << room;
    EXPECT_TRUE(buffer.substr(0, direct) == data.substr(0, direct)) << "room " << room;
    // The rest of the data is in the payload, after the 9 header bytes, where it always was.
    ASSERT_EQ(payload.size(), 9 + data.size());
    EXPECT_TRUE(payload.substr(9 + direct) == std::string_view(data).substr(direct));
  }
}

TEST(SshPackets, OtherMessagesAndTamperedDataNeverCountAsDelivered) {
  std::mt19937 rng(7);
  const std::string key = random_string(rng, 16), iv = random_string(rng, 12);
  std::string buffer(1 << 16, '\0');
  {
    PacketSealer sealer;
    PacketOpener opener;
    ASSERT_TRUE(sealer.set_gcm(key, iv));
    ASSERT_TRUE(opener.set_gcm(key, iv));
    const std::string adjust = Writer(93).u32(0).u32(12345).take();  // WINDOW_ADJUST
    std::string wire = sealed(sealer, adjust);
    DataTarget target{buffer.data(), buffer.size(), 7};
    std::string_view payload;
    size_t consumed;
    ASSERT_EQ(opener.open(wire.data(), wire.size(), payload, consumed, &target),
              PacketOpener::Status::packet);
    EXPECT_EQ(target.delivered, 0u);
    EXPECT_EQ(payload, adjust);
  }
  PacketSealer sealer;
  PacketOpener opener;
  ASSERT_TRUE(sealer.set_gcm(key, iv));
  ASSERT_TRUE(opener.set_gcm(key, iv));
  std::string wire = sealed(sealer, channel_data(random_string(rng, 5000)));
  wire[wire.size() - 100] ^= 1;  // in the data
  DataTarget target{buffer.data(), buffer.size(), 0};
  std::string_view payload;
  size_t consumed;
  EXPECT_EQ(opener.open(wire.data(), wire.size(), payload, consumed, &target),
            PacketOpener::Status::bad);
  EXPECT_EQ(target.delivered, 0u);
}

}  // namespace
}  // namespace skein::ssh
