// skein/permission.hpp: what a user the mount does not trust may open and change, as the kernel
// judges it (default_permissions, chmod, chown, truncate, utimes) without capabilities.
#include "skein/permission.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>

namespace skein {
namespace {

const Credentials kAlice{1000, 1000, {2000}};  // in group 2000 too

TEST(Permission, OpensNeedTheBitsOfTheirClass) {
  EXPECT_EQ(access_bits_of_open(O_RDONLY), 4u);
  EXPECT_EQ(access_bits_of_open(O_WRONLY), 2u);
  EXPECT_EQ(access_bits_of_open(O_RDWR | O_APPEND), 6u);
  EXPECT_EQ(access_bits_of_open(O_RDONLY | O_TRUNC), 6u);
  auto may = [](uint32_t mode, uint32_t owner, uint32_t group, uint32_t bits) {
    return may_access(mode, owner, group, kAlice.uid, kAlice.gid, kAlice.groups, bits);
  };
  EXPECT_TRUE(may(0600, 1000, 0, 6));
  EXPECT_FALSE(may(0066, 1000, 0, 4));  // the owner's bits win, however open the others are
  EXPECT_TRUE(may(0640, 0, 2000, 4));   // a supplementary group
  EXPECT_FALSE(may(0640, 0, 2000, 2));
  EXPECT_TRUE(may(0604, 0, 0, 4));
  EXPECT_FALSE(may(0600, 0, 0, 4));
  EXPECT_TRUE(may_access(0000, 5, 5, 0, 0, {}, 6));  // root
}

TEST(Permission, OnlyTheOwnerChangesModeAndTimesAndOnlyRootGivesAFileAway) {
  AttrChangeAsked chmod;
  chmod.mode = 0600;
  EXPECT_EQ(may_change_attrs(0644, 1000, 1000, kAlice, chmod), 0);
  EXPECT_EQ(may_change_attrs(0666, 0, 0, kAlice, chmod), EPERM);  // root's, writable or not
  // The set-ID bits alone may go, whoever asks (a write by another user takes them away).
  AttrChangeAsked kill;
  kill.mode = 0755;
  EXPECT_EQ(may_change_attrs(06755, 0, 0, kAlice, kill), 0);
  EXPECT_EQ(may_change_attrs(04755, 0, 0, kAlice, kill), 0);
  kill.mode = 0777;
  EXPECT_EQ(may_change_attrs(04755, 0, 0, kAlice, kill), EPERM);
  AttrChangeAsked chown;
  chown.uid = 1000;
  EXPECT_EQ(may_change_attrs(0644, 1000, 1000, kAlice, chown), 0);  // to itself: no change
  chown.uid = 1001;
  EXPECT_EQ(may_change_attrs(0644, 1000, 1000, kAlice, chown), EPERM);
  AttrChangeAsked chgrp;
  chgrp.gid = 2000;
  EXPECT_EQ(may_change_attrs(0644, 1000, 1000, kAlice, chgrp), 0);  // to one of its groups
  chgrp.gid = 3000;
  EXPECT_EQ(may_change_attrs(0644, 1000, 1000, kAlice, chgrp), EPERM);
  chgrp.gid = 2000;
  EXPECT_EQ(may_change_attrs(0644, 0, 0, kAlice, chgrp), EPERM);  // not its file
  AttrChangeAsked times;
  times.times = true;
  EXPECT_EQ(may_change_attrs(0666, 0, 0, kAlice, times), EPERM);
  times = {};
  times.times_now = true;  // touch: ownership or write permission
  EXPECT_EQ(may_change_attrs(0666, 0, 0, kAlice, times), 0);
  EXPECT_EQ(may_change_attrs(0644, 0, 0, kAlice, times), EACCES);
  EXPECT_EQ(may_change_attrs(0444, 1000, 0, kAlice, times), 0);
  AttrChangeAsked cut;
  cut.size = true;  // truncate: write permission, owner or not
  EXPECT_EQ(may_change_attrs(0666, 0, 0, kAlice, cut), 0);
  EXPECT_EQ(may_change_attrs(0644, 0, 0, kAlice, cut), EACCES);
  EXPECT_EQ(may_change_attrs(0444, 1000, 1000, kAlice, cut), EACCES);
  EXPECT_EQ(may_change_attrs(0000, 0, 0, Credentials{}, chmod), 0);  // root
}

TEST(Permission, AChmodKeepsTheSetGroupIdBitOnlyForAMemberOfTheFilesGroup) {
  EXPECT_EQ(mode_set_by(02755, 1000, kAlice), 02755u);  // its own group
  EXPECT_EQ(mode_set_by(02755, 2000, kAlice), 02755u);  // a supplementary group
  EXPECT_EQ(mode_set_by(02755, 3000, kAlice), 0755u);   // none of its groups: dropped silently
  EXPECT_EQ(mode_set_by(06755, 3000, kAlice), 04755u);  // set-user-ID stays
  EXPECT_EQ(mode_set_by(0755, 3000, kAlice), 0755u);
  EXPECT_EQ(mode_set_by(02755, 3000, Credentials{}), 02755u);  // root
}

}  // namespace
}  // namespace skein
