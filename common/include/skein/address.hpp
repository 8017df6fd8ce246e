// Network addresses as skein's programs take them: HOST:PORT (gRPC's form; an IPv6 host is
// written [::1]:7070).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace skein {

// The port of HOST:PORT: the decimal number after the last colon, up to 65535 (0 included, which
// a listener takes for "any free port"). Nothing when there is no colon, no host before it, or
// the port is missing, not a plain decimal number or too large.
std::optional<uint16_t> port_of_address(std::string_view address);

}  // namespace skein
