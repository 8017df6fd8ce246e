// The remote watcher's output cut into inotifywait's events and the other lines: names with
// newlines and trailing spaces, output that arrives in pieces, and an older inotifywait whose
// events end at a newline.
#include "coherence/inotify_output.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace skein {
namespace {

// Every item `out` has after `data` came in pieces of `piece` bytes, as "E events|path" for an
// event and "L text" for another line.
std::vector<std::string> items_of(InotifyOutput& out, const std::string& data, size_t piece) {
  std::vector<std::string> got;
  for (size_t at = 0; at < data.size(); at += piece) {
    out.append(data.data() + at, std::min(piece, data.size() - at));
    while (auto item = out.next())
      got.push_back(item->event ? "E " + item->events + "|" + item->path : "L " + item->text);
  }
  return got;
}

const std::string kNulOutput = std::string(InotifyOutput::kNulEvents) + "\n" +
                               "Setting up watches.  Beware: since -r was given, this may take a "
                               "while!\nWatches established.\n" +
                               std::string("CREATE /e/new\nline\0", 19) +
                               std::string("CLOSE_WRITE,CLOSE /e/trail  \0", 29) +
                               "SKEIN-HEARTBEAT\n" + std::string("CREATE,ISDIR /e/d\0", 18) +
                               "Couldn't watch new directory /e/d: No space left on device\n" +
                               std::string("DELETE /e/LOOKS LIKE\nAN EVENT \0", 31);

const std::vector<std::string> kNulItems = {
    "L Setting up watches.  Beware: since -r was given, this may take a while!",
    "L Watches established.",
    "E CREATE|/e/new\nline",
    "E CLOSE_WRITE,CLOSE|/e/trail  ",
    "L SKEIN-HEARTBEAT",
    "E CREATE,ISDIR|/e/d",
    "L Couldn't watch new directory /e/d: No space left on device",
    "E DELETE|/e/LOOKS LIKE\nAN EVENT ",
};

TEST(InotifyOutput, EventsEndedByANulKeepNewlinesAndTrailingSpacesOfTheirNames) {
  InotifyOutput out;
  EXPECT_EQ(items_of(out, kNulOutput, kNulOutput.size()), kNulItems);
  EXPECT_TRUE(out.nul_events());
}

TEST(InotifyOutput, OutputThatComesInPiecesIsCutTheSame) {
  for (size_t piece : {1u, 2u, 3u, 7u, 64u}) {
    InotifyOutput out;
    EXPECT_EQ(items_of(out, kNulOutput, piece), kNulItems) << "pieces of " << piece;
  }
}

// Without the marker (an inotifywait that does not know --no-newline) an event ends at a newline:
// a name's part after a newline is a line of its own, for the watcher to take as a loss.
TEST(InotifyOutput, WithoutTheMarkerEventsEndAtANewline) {
  InotifyOutput out;
  const std::string data = "Watches established.\nCREATE /e/new\nline\nCLOSE_WRITE,CLOSE /e/t  \n";
  EXPECT_EQ(items_of(out, data, data.size()),
            (std::vector<std::string>{"L Watches established.", "E CREATE|/e/new", "L line",
                                      "E CLOSE_WRITE,CLOSE|/e/t  "}));
  EXPECT_FALSE(out.nul_events());
}

TEST(InotifyOutput, AnUnendedItemLongerThanAnyIsDroppedAndWhatFollowsIsCut) {
  InotifyOutput out;
  const std::string marker = std::string(InotifyOutput::kNulEvents) + "\n";
  EXPECT_TRUE(items_of(out, marker, marker.size()).empty());
  const std::string endless = "CREATE /e/" + std::string(InotifyOutput::kMaxItem + 10, 'x');
  EXPECT_TRUE(items_of(out, endless, 4096).empty());
  // The rest of what was dropped comes as a line, up to the next newline (once watching, the
  // watcher takes it as a loss and ends the session); the items after it are whole.
  const std::string after =
      std::string("xx\0", 3) + "Watches established.\n" + std::string("ATTRIB /e/f\0", 12);
  const auto got = items_of(out, after, after.size());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].starts_with("L x")) << got[0];
  EXPECT_TRUE(got[0].ends_with(std::string("xx\0", 3) + "Watches established.")) << got[0];
  EXPECT_EQ(got[1], "E ATTRIB|/e/f");
}

TEST(InotifyOutput, AnEventWithoutAPathIsAnEventAndAWordAloneIsALine) {
  InotifyOutput out;
  const std::string data = std::string(InotifyOutput::kNulEvents) + "\n" +
                           std::string("Q_OVERFLOW \0", 12) + "SKEIN-NO-INOTIFYWAIT\nDONE\n";
  EXPECT_EQ(items_of(out, data, data.size()),
            (std::vector<std::string>{"E Q_OVERFLOW|", "L SKEIN-NO-INOTIFYWAIT", "L DONE"}));
}

}  // namespace
}  // namespace skein
