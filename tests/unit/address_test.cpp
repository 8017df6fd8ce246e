// port_of_address: the one reading of HOST:PORT that the gateway's `listen` and skeinctl's
// --gateway share.
#include "skein/address.hpp"

#include <gtest/gtest.h>

using skein::port_of_address;

TEST(PortOfAddress, IsTheNumberAfterTheLastColon) {
  EXPECT_EQ(port_of_address("127.0.0.1:7070"), 7070);
  EXPECT_EQ(port_of_address("gw.example.org:65535"), 65535);
  EXPECT_EQ(port_of_address("[::1]:7070"), 7070);
  EXPECT_EQ(port_of_address("0.0.0.0:0"), 0);  // a listener's "any free port"
}

TEST(PortOfAddress, RefusesWhatIsNotHostColonPort) {
  for (const char* bad : {"", "7070", ":7070", "host:", "host:70a0", "host:+70", "host:-1",
                          "host:65536", "host:123456", "host:99999", "host: 70", "[::1]"})
    EXPECT_EQ(port_of_address(bad), std::nullopt) << bad;
}
