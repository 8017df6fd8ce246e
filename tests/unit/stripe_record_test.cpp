// The stripe records of the striped layout: their file format, and the judgement of what a set of
// backends holds against a configuration (match, write anew, or refuse and say why).
#include "namespace/stripe_record.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace skein {
namespace {

constexpr uint64_t MiB = 1 << 20;
const std::vector<std::string> kNames = {"srv0", "srv1", "srv2"};
const std::string kLayout = "0123456789abcdef0123456789abcdef";

StripeRecord record(uint32_t part, uint64_t stripe = MiB, uint32_t width = 3,
                    const std::string& layout = kLayout) {
  return StripeRecord{layout, stripe, width, part, {"srv0", "srv1", "srv2"}};
}
FoundRecord held(StripeRecord r) { return FoundRecord{true, std::move(r), {}, {}}; }
FoundRecord none() { return FoundRecord{}; }
// What the backends hold after a layout of `width` backends was recorded, in stripe order.
std::vector<FoundRecord> recorded(uint32_t width = 3) {
  std::vector<FoundRecord> out;
  for (uint32_t b = 0; b < width; ++b) out.push_back(held(record(b, MiB, width)));
  return out;
}

TEST(StripeRecord, FormatsAndParsesBack) {
  StripeRecord r = record(2, 64 << 10);
  std::string text = format_stripe_record(r);
  EXPECT_NE(text.find("part 2"), std::string::npos) << text;  // the comment says what it is
  std::string error;
  auto back = parse_stripe_record(text, error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->layout, r.layout);
  EXPECT_EQ(back->stripe_size, r.stripe_size);
  EXPECT_EQ(back->width, r.width);
  EXPECT_EQ(back->part, r.part);
  EXPECT_EQ(back->backends, r.backends);
}

TEST(StripeRecord, RefusesWhatIsNotARecord) {
  std::string error;
  EXPECT_FALSE(parse_stripe_record("hello there", error));
  EXPECT_NE(error.find("not a stripe record"), std::string::npos);
  error.clear();
  EXPECT_FALSE(parse_stripe_record("layout = \"ab\"\nstripe_size = 4096\nwidth = 2\npart = 2\n",
                                   error));  // part out of range
  EXPECT_FALSE(error.empty());
  EXPECT_FALSE(parse_stripe_record("layout = \"ab\"\nwidth = 2\npart = 0\n", error));
}

TEST(StripeRecord, NewLayoutIdsDiffer) {
  auto a = new_stripe_layout_id(), b = new_stripe_layout_id();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
}

TEST(StripeCheck, NoRecordsAnywhereAreWrittenWithANewLayout) {
  auto c = check_stripe_records({none(), none(), none()}, MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::record_anew);
  EXPECT_TRUE(c.layout.empty());
}

TEST(StripeCheck, RecordsOfThisConfigurationMatch) {
  auto c = check_stripe_records(recorded(), MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::matches) << c.reason;
  EXPECT_EQ(c.layout, kLayout);
}

TEST(StripeCheck, AnUnfinishedWriteIsFinishedWithTheSameLayout) {
  // Backend 0's record is written last: the others' fit, so they are written again.
  auto c = check_stripe_records({none(), held(record(1)), none()}, MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::record_anew) << c.reason;
  EXPECT_EQ(c.layout, kLayout);
  // ...but not when what they hold does not fit.
  c = check_stripe_records({none(), held(record(1, 2 * MiB)), none()}, MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::refuse);
  EXPECT_NE(c.reason.find("srv0 holds no record"), std::string::npos) << c.reason;
}

TEST(StripeCheck, AnotherStripeSizeIsRefused) {
  auto c = check_stripe_records(recorded(), 2 * MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::refuse);
  EXPECT_NE(c.reason.find("1 MiB stripes"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("the configuration says 2 MiB stripes"), std::string::npos) << c.reason;
}

TEST(StripeCheck, ReorderedBackendsAreRefused) {
  auto found = recorded();
  std::swap(found[1], found[2]);  // the configuration now lists srv2's server second
  auto c = check_stripe_records(found, MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::refuse);
  EXPECT_NE(c.reason.find("srv1 holds part 2"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("position 1"), std::string::npos) << c.reason;
}

TEST(StripeCheck, AnotherWidthIsRefused) {
  auto found = recorded();
  found.push_back(none());  // a fourth backend added to the list
  auto c = check_stripe_records(found, MiB, {"srv0", "srv1", "srv2", "srv3"});
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::refuse);
  EXPECT_NE(c.reason.find("stripes over 4 backends"), std::string::npos) << c.reason;
  // One taken away.
  found = recorded();
  found.pop_back();
  c = check_stripe_records(found, MiB, {"srv0", "srv1"});
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::refuse);
  EXPECT_NE(c.reason.find("stripes over 2 backends"), std::string::npos) << c.reason;
}

TEST(StripeCheck, AReplacedServerIsRefused) {
  auto found = recorded();
  found[2] = none();  // an empty server in srv2's place
  auto c = check_stripe_records(found, MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::refuse);
  EXPECT_NE(c.reason.find("srv2 holds no part of layout 01234567"), std::string::npos) << c.reason;
}

// Backend 0's record is written last, so none there beside the others' reads as an unfinished
// write; but an empty server in backend 0's place has none either. The names at the others' roots
// tell them apart: backend 0 holds every one of them, unless it is not the server they were
// striped with.
TEST(StripeCheck, AnEmptyBackendZeroBesideOthersHoldingPartsIsRefused) {
  auto found = recorded();
  found[0] = none();
  found[1].entries = {"dir", "f"};
  auto c = check_stripe_records(found, MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::refuse);
  EXPECT_NE(c.reason.find("srv0 holds no record and no 'dir'"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("which srv1 holds beside part 1 of layout 01234567"), std::string::npos)
      << c.reason;
  // Backend 0 holding the names: files striped before records were kept, and a first write of
  // the records that did not finish.
  found[0].entries = {"dir", "f", "more"};
  c = check_stripe_records(found, MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::record_anew) << c.reason;
  EXPECT_EQ(c.layout, kLayout);
}

TEST(StripeCheck, PartsOfAnotherLayoutAreRefused) {
  auto found = recorded();
  found[1] = held(record(1, MiB, 3, "ffffffffffffffffffffffffffffffff"));
  auto c = check_stripe_records(found, MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::refuse);
  EXPECT_NE(c.reason.find("striped separately"), std::string::npos) << c.reason;
  // Without backend 0's record, the layout compared with is the first other backend's.
  found[0] = none();
  found[1] = held(record(1));
  found[2] = held(record(2, MiB, 3, "ffffffffffffffffffffffffffffffff"));
  c = check_stripe_records(found, MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::refuse);
  EXPECT_NE(c.reason.find("but srv1 holds layout 01234567"), std::string::npos) << c.reason;
}

TEST(StripeCheck, AnUnreadableRecordIsRefused) {
  auto found = recorded();
  found[1] = FoundRecord{true, std::nullopt, "not a stripe record (oops)", {}};
  auto c = check_stripe_records(found, MiB, kNames);
  EXPECT_EQ(c.outcome, StripeCheck::Outcome::refuse);
  EXPECT_NE(c.reason.find("srv1's .skein-stripes is unreadable"), std::string::npos) << c.reason;
}

}  // namespace
}  // namespace skein
