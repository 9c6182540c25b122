#include "common/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tributary {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kLimit = 1 << 20;

TEST(SharedRegionTest, WritesThroughOneMappingAreReadThroughTheOther) {
  absl::StatusOr<SharedRegion> made = SharedRegion::Create(8192);
  ASSERT_TRUE(made.ok()) << made.status();
  absl::StatusOr<SharedRegion> mapped = SharedRegion::Map(::dup(made->fd()), 8192, kLimit);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  made->CloseDescriptor();
  EXPECT_EQ(mapped->size(), 8192u);
  std::memcpy(made->data() + 4000, "gradient", 8);
  EXPECT_EQ(std::string(mapped->data() + 4000, 8), "gradient");
  std::memcpy(mapped->data() + 100, "update", 6);
  EXPECT_EQ(std::string(made->data() + 100, 6), "update");
}

TEST(SharedRegionTest, HoldsChecksRangesWithoutOverflow) {
  absl::StatusOr<SharedRegion> region = SharedRegion::Create(4096);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_TRUE(region->Holds(0, 4096));
  EXPECT_TRUE(region->Holds(4096, 0));
  EXPECT_TRUE(region->Holds(1000, 3096));
  EXPECT_FALSE(region->Holds(1000, 3097));
  EXPECT_FALSE(region->Holds(4097, 0));
  EXPECT_FALSE(region->Holds(8, ~uint64_t{0}));
  EXPECT_FALSE(region->Holds(~uint64_t{0}, 2));
}

TEST(SharedRegionTest, RefusesARegionThatCanShrink) {
  // A memfd without seals: the peer could truncate it under the mapping (SIGBUS).
  const int fd = ::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  absl::StatusOr<SharedRegion> mapped = SharedRegion::Map(fd, 4096, kLimit);
  EXPECT_TRUE(absl::IsInvalidArgument(mapped.status())) << mapped.status();
  EXPECT_THAT(mapped.status().message(), HasSubstr("F_SEAL_SHRINK"));
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "Map closes the descriptor it refused";
}

TEST(SharedRegionTest, RefusesARegionWhoseSealsCanStillChange) {
  const int fd = ::memfd_create("no-seal-seal", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  absl::StatusOr<SharedRegion> mapped = SharedRegion::Map(fd, 4096, kLimit);
  EXPECT_TRUE(absl::IsInvalidArgument(mapped.status())) << mapped.status();
  EXPECT_THAT(mapped.status().message(), HasSubstr("F_SEAL_SEAL"));
}

TEST(SharedRegionTest, RefusesWhatIsNotAMemfd) {
  int pipe_ends[2];
  ASSERT_EQ(::pipe(pipe_ends), 0);
  absl::StatusOr<SharedRegion> mapped = SharedRegion::Map(pipe_ends[0], 4096, kLimit);
  EXPECT_TRUE(absl::IsInvalidArgument(mapped.status())) << mapped.status();
  EXPECT_THAT(mapped.status().message(), HasSubstr("not a sealable memfd"));
  ::close(pipe_ends[1]);
}

TEST(SharedRegionTest, RefusesAnotherSizeThanAnnouncedAndOneAboveTheLimit) {
  absl::StatusOr<SharedRegion> made = SharedRegion::Create(8192);
  ASSERT_TRUE(made.ok()) << made.status();
  absl::StatusOr<SharedRegion> wrong = SharedRegion::Map(::dup(made->fd()), 4096, kLimit);
  EXPECT_TRUE(absl::IsInvalidArgument(wrong.status())) << wrong.status();
  EXPECT_THAT(wrong.status().message(), HasSubstr("8192 bytes, announced as 4096"));
  absl::StatusOr<SharedRegion> large = SharedRegion::Map(::dup(made->fd()), 8192, 4096);
  EXPECT_TRUE(absl::IsInvalidArgument(large.status())) << large.status();
  EXPECT_THAT(large.status().message(), HasSubstr("the limit is 4096"));
  EXPECT_TRUE(absl::IsInvalidArgument(SharedRegion::Create(0).status()));
}

TEST(SharedRegionTest, TheDescriptorTravelsWithTheFirstBytes) {
  int ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends), 0);
  absl::StatusOr<SharedRegion> made = SharedRegion::Create(4096);
  ASSERT_TRUE(made.ok()) << made.status();
  std::memcpy(made->data(), "shared", 6);
  char first[] = "announce";
  char second[] = "-ment";
  iovec pieces[2] = {{first, 8}, {second, 5}};
  ASSERT_TRUE(WriteWithDescriptor(ends[0], pieces, 2, made->fd(), "offer").ok());
  char got[13];
  int passed = -1;
  ASSERT_TRUE(ReadWithDescriptor(ends[1], got, sizeof(got), &passed, "offer").ok());
  EXPECT_EQ(std::string(got, sizeof(got)), "announce-ment");
  ASSERT_GE(passed, 0);
  absl::StatusOr<SharedRegion> mapped = SharedRegion::Map(passed, 4096, kLimit);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(std::string(mapped->data(), 6), "shared");

  // Without a descriptor: none, and the bytes still arrive.
  ASSERT_EQ(::send(ends[0], first, 8, 0), 8);
  ASSERT_TRUE(ReadWithDescriptor(ends[1], got, 8, &passed, "plain").ok());
  EXPECT_EQ(passed, -1);
  ::close(ends[0]);
  EXPECT_TRUE(absl::IsOutOfRange(ReadWithDescriptor(ends[1], got, 8, &passed, "end")));
  ::close(ends[1]);
}

}  // namespace
}  // namespace tributary
