// The record a striped layout keeps on each of its backends: which layout the backend's parts
// belong to (a random id), the stripe size, the width and the backend's position. A configuration
// that no longer matches the files (another stripe size or width, backends reordered, one replaced
// by an empty server) would read and write every file at the wrong offsets; with the record the
// layout refuses to serve instead and says why. Pure logic here; the I/O is StripedLayout's. The
// format is in docs/striping.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace skein {

// At the root of each backend of a striped layout; hidden from the layout's listings and names.
inline constexpr std::string_view kStripeRecordName = ".skein-stripes";
// Written first, then renamed over the record, so that a record is never half written.
inline constexpr std::string_view kStripeRecordTemp = ".skein-stripes.new";

struct StripeRecord {
  std::string layout;  // 32 hex digits, the same on every backend of one layout
  uint64_t stripe_size = 0;
  uint32_t width = 0;
  uint32_t part = 0;                  // this backend's position, 0 .. width-1
  std::vector<std::string> backends;  // every backend's name when it was written, for messages
};

// The record as the file holds it (TOML).
std::string format_stripe_record(const StripeRecord& record);
// Parses a record file; on failure says why in `error`.
std::optional<StripeRecord> parse_stripe_record(std::string_view text, std::string& error);

// What one backend holds where its record belongs.
struct FoundRecord {
  bool present = false;                // something is there
  std::optional<StripeRecord> record;  // it parsed (present only)
  std::string error;                   // why it did not (present only)
  // The names at the backend's root besides the records (kStripeRecordName, kStripeRecordTemp).
  // Listed only where backend 0 holds no record: what tells an unfinished write of the records
  // from an empty server in backend 0's place.
  std::vector<std::string> entries;
};

struct StripeCheck {
  enum class Outcome {
    matches,      // every backend holds the record of this configuration
    record_anew,  // write the records (with id `layout`; empty: a new one): none yet, or a write
                  // that did not finish
    refuse,       // the files were striped otherwise: serve nothing (`reason` says why)
  };
  Outcome outcome = Outcome::refuse;
  std::string layout;
  std::string reason;
};

// Judges what the backends `names` (in stripe order) hold, `found` in the same order, against a
// configured stripe size. Records are written to backend 0 last, so a backend 0 without a record
// means none was finished: the others' records must then fit the configuration, and are written
// again, unless another backend holding a record holds a name at its root that backend 0 does not
// (`entries`): then backend 0 is a server the layout was not striped over. A backend 0 with a
// record means every backend must hold the same layout's record, with the configured stripe size
// and width and its own position.
StripeCheck check_stripe_records(const std::vector<FoundRecord>& found, uint64_t stripe_size,
                                 const std::vector<std::string>& names);

// "1 MiB", "64 KiB", "1000 B".
std::string stripe_size_text(uint64_t bytes);

// 32 random hex digits.
std::string new_stripe_layout_id();

// "part 1 of layout 3f2a9c1e… (1 MiB stripes over 3 backends: srv0, srv1, srv2)".
std::string describe_stripe_record(const StripeRecord& record);

}  // namespace skein
