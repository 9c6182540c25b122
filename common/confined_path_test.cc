#include "common/confined_path.h"

#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace tributary {
namespace {

// A new directory under the test's temporary directory, by its real path (so that
// expected results compare equal to resolved ones).
std::string Fresh(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  mkdir(dir.c_str(), 0755);
  char real[PATH_MAX];
  return realpath(dir.c_str(), real) != nullptr ? std::string(real) : dir;
}

TEST(ConfinePathTest, PathsInsideTheRootResolve) {
  const std::string root = Fresh("root_ok");
  mkdir((root + "/data").c_str(), 0755);
  std::ofstream(root + "/data/train.csv") << "1,2\n";
  EXPECT_EQ(*ConfinePath("train_path", root + "/data/train.csv", "/", root, "--data_root"),
            root + "/data/train.csv");
  // Relative paths are taken from the base; parts that do not exist yet are fine.
  EXPECT_EQ(*ConfinePath("checkpoint_dir", "job-7/ckpt", root, root, "--checkpoint_root"),
            root + "/job-7/ckpt");
  EXPECT_EQ(*ConfinePath("checkpoint_dir", "./a//b/", root, root, "--checkpoint_root"),
            root + "/a/b");
  EXPECT_EQ(*ConfinePath("checkpoint_dir", root, "/", root, "--checkpoint_root"), root);
  // The root "/" confines nothing but still refuses "..".
  EXPECT_TRUE(ConfinePath("train_path", "/etc/hostname", "/", "/", "--data_root").ok());
}

TEST(ConfinePathTest, DotDotAndOutsidePathsAreRefusedNamingPathAndRoot) {
  const std::string root = Fresh("root_escape");
  for (const std::string& path : {std::string("../../x"), root + "/../x", std::string("a/../b")}) {
    absl::StatusOr<std::string> refused =
        ConfinePath("checkpoint_dir", path, root, root, "--checkpoint_root");
    ASSERT_FALSE(refused.ok()) << path;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_NE(refused.status().message().find(path), std::string::npos);
    EXPECT_NE(refused.status().message().find("--checkpoint_root=" + root), std::string::npos);
  }
  absl::StatusOr<std::string> outside =
      ConfinePath("checkpoint_dir", "/tmp/anything", "/", root, "--checkpoint_root");
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied);
  // A sibling whose name starts with the root's is outside too.
  EXPECT_FALSE(ConfinePath("p", root + "-sibling/x", "/", root, "--data_root").ok());
  EXPECT_EQ(ConfinePath("p", "", "/", root, "--data_root").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConfinePath("p", "x", "/", "", "--data_root").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConfinePathTest, SymbolicLinksOutOfTheRootAreRefused) {
  const std::string root = Fresh("root_links");
  const std::string outside = Fresh("outside_links");
  std::ofstream(outside + "/secret") << "s";
  ASSERT_EQ(symlink(outside.c_str(), (root + "/escape").c_str()), 0);
  ASSERT_EQ(symlink((outside + "/secret").c_str(), (root + "/file").c_str()), 0);
  for (const std::string& path :
       {root + "/escape/secret", root + "/file", root + "/escape/new/dir"}) {
    absl::StatusOr<std::string> refused = ConfinePath("train_path", path, "/", root, "--data_root");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << path;
  }
  // A link that stays inside is followed.
  mkdir((root + "/real").c_str(), 0755);
  ASSERT_EQ(symlink((root + "/real").c_str(), (root + "/alias").c_str()), 0);
  EXPECT_EQ(*ConfinePath("train_path", root + "/alias/x", "/", root, "--data_root"),
            root + "/real/x");
}

}  // namespace
}  // namespace tributary
