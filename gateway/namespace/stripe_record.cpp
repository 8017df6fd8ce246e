// Stripe records; see stripe_record.hpp.
#include "namespace/stripe_record.hpp"

#include <toml++/toml.h>

#include <random>
#include <set>
#include <sstream>

namespace skein {

std::string stripe_size_text(uint64_t n) {
  if (n % (1 << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n % (1 << 10) == 0) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " B";
}

std::string format_stripe_record(const StripeRecord& r) {
  std::ostringstream out;
  out << "# Written by skein-gateway: this directory holds part " << r.part
      << " of every file of a\n"
      << "# striped layout (docs/striping.md). The gateway checks it before it serves the layout;\n"
      << "# do not edit or remove it while the layout holds files.\n";
  toml::table t;
  t.insert("layout", r.layout);
  t.insert("stripe_size", static_cast<int64_t>(r.stripe_size));
  t.insert("width", static_cast<int64_t>(r.width));
  t.insert("part", static_cast<int64_t>(r.part));
  toml::array names;
  for (auto& n : r.backends) names.push_back(n);
  t.insert("backends", std::move(names));
  out << t << "\n";
  return out.str();
}

std::optional<StripeRecord> parse_stripe_record(std::string_view text, std::string& error) {
  toml::table t;
  try {
    t = toml::parse(text);
  } catch (const toml::parse_error& e) {
    error = "not a stripe record (" + std::string(e.description()) + ")";
    return std::nullopt;
  }
  StripeRecord r;
  auto layout = t["layout"].value<std::string>();
  auto stripe = t["stripe_size"].value<int64_t>();
  auto width = t["width"].value<int64_t>();
  auto part = t["part"].value<int64_t>();
  if (!layout || layout->empty() || !stripe || *stripe <= 0 || !width || *width <= 0 || !part ||
      *part < 0 || *part >= *width) {
    error = "not a stripe record (layout, stripe_size, width or part missing or out of range)";
    return std::nullopt;
  }
  r.layout = *layout;
  r.stripe_size = uint64_t(*stripe);
  r.width = uint32_t(*width);
  r.part = uint32_t(*part);
  if (auto* names = t["backends"].as_array())
    for (auto& n : *names)
      if (auto s = n.value<std::string>()) r.backends.push_back(*s);
  return r;
}

std::string new_stripe_layout_id() {
  std::random_device rd;
  std::string id;
  static const char* const kHex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) id += kHex[rd() % 16];
  return id;
}

std::string describe_stripe_record(const StripeRecord& r) {
  std::string out = "part " + std::to_string(r.part) + " of layout " + r.layout.substr(0, 8) +
                    " (" + stripe_size_text(r.stripe_size) + " stripes over " +
                    std::to_string(r.width) + " backends";
  for (size_t i = 0; i < r.backends.size(); ++i) out += (i ? ", " : ": ") + r.backends[i];
  return out + ")";
}

namespace {

// Why `r`, found on backend `b` of a configuration with `stripe_size` over `width`, does not fit
// it; empty if it does. `layout`: the id that backend `holder` holds (empty: any).
std::string misfit(const StripeRecord& r, size_t b, uint64_t stripe_size, size_t width,
                   const std::string& layout, size_t holder,
                   const std::vector<std::string>& names) {
  const std::string held = names[b] + " holds " + describe_stripe_record(r);
  if (!layout.empty() && r.layout != layout)
    return held + ", but " + names[holder] + " holds layout " + layout.substr(0, 8) +
           ": the two were striped separately";
  if (r.stripe_size != stripe_size)
    return held + ", but the configuration says " + stripe_size_text(stripe_size) + " stripes";
  if (r.width != width)
    return held + ", but the configuration stripes over " + std::to_string(width) + " backends";
  if (r.part != b) return held + ", but the configuration puts it at position " + std::to_string(b);
  return {};
}

}  // namespace

StripeCheck check_stripe_records(const std::vector<FoundRecord>& found, uint64_t stripe_size,
                                 const std::vector<std::string>& names) {
  using Outcome = StripeCheck::Outcome;
  auto refuse = [](std::string reason) {
    return StripeCheck{Outcome::refuse, {}, std::move(reason)};
  };
  for (size_t b = 0; b < found.size(); ++b)
    if (found[b].present && !found[b].record)
      return refuse(names[b] + "'s " + std::string(kStripeRecordName) +
                    " is unreadable: " + found[b].error);

  if (!found[0].present) {
    // No layout was finished here: whatever the others hold must fit this configuration.
    std::string layout;
    size_t holder = 0;
    for (size_t b = 1; b < found.size(); ++b) {
      if (!found[b].present) continue;
      if (auto why = misfit(*found[b].record, b, stripe_size, found.size(), layout, holder, names);
          !why.empty())
        return refuse(why + "; " + names[0] + " holds no record");
      layout = found[b].record->layout;
      holder = b;
    }
    // An empty server in backend 0's place holds no record either; but every name at the root
    // of a layout is on backend 0 (a file's part 0, a directory on every backend), so a name
    // another backend holds beside its record and backend 0 does not says that backend 0 is not
    // the server those parts were striped with. Written anew, the records would have it serve an
    // empty namespace, and a file created under an old name would truncate its parts elsewhere.
    const std::set<std::string> on_first(found[0].entries.begin(), found[0].entries.end());
    for (size_t b = 1; b < found.size(); ++b) {
      if (!found[b].present) continue;
      for (auto& name : found[b].entries)
        if (!on_first.count(name))
          return refuse(names[0] + " holds no record and no '" + name + "', which " + names[b] +
                        " holds beside " + describe_stripe_record(*found[b].record) + ": " +
                        names[0] +
                        " is not the server that layout was striped over (an empty "
                        "one in its place?)");
    }
    return StripeCheck{Outcome::record_anew, layout, {}};
  }

  const std::string& layout = found[0].record->layout;
  for (size_t b = 0; b < found.size(); ++b) {
    if (!found[b].present)
      return refuse(
          names[b] + " holds no part of layout " + layout.substr(0, 8) + ", which " + names[0] +
          " holds (" + describe_stripe_record(*found[0].record) +
          "): it is not a server that layout was striped over, or its record was removed");
    if (auto why = misfit(*found[b].record, b, stripe_size, found.size(), layout, 0, names);
        !why.empty())
      return refuse(why);
  }
  return StripeCheck{Outcome::matches, layout, {}};
}

}  // namespace skein
