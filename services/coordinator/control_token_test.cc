// The control token: read from its file, and the bearer check.
#include "services/coordinator/control_token.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

namespace tributary::coordinator {
namespace {

using ::testing::HasSubstr;

std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << content;
  return path;
}

TEST(ControlTokenTest, ReadsTheFileWithoutSurroundingWhitespace) {
  absl::StatusOr<std::string> token = ReadControlToken(WriteFile("token", "\n  abc123 \n"));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "abc123");
}

TEST(ControlTokenTest, EmptyOrMissingFileIsAnErrorNamingIt) {
  const std::string empty = WriteFile("empty", " \n");
  EXPECT_THAT(ReadControlToken(empty).status().message(), HasSubstr(empty));
  EXPECT_THAT(ReadControlToken(empty).status().message(), HasSubstr("empty"));
  EXPECT_THAT(ReadControlToken("/nonexistent/token").status().message(), HasSubstr("cannot read"));
}

TEST(ControlTokenTest, BearerCheck) {
  EXPECT_TRUE(CheckBearerToken("Bearer abc123", "abc123", "SubmitJob").ok());
  const absl::Status missing = CheckBearerToken(std::nullopt, "abc123", "SubmitJob");
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(missing.message(), HasSubstr("SubmitJob needs 'authorization: Bearer <token>'"));
  EXPECT_EQ(CheckBearerToken("abc123", "abc123", "StopJob").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckBearerToken("Bearer abc12", "abc123", "StopJob").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckBearerToken("Bearer abc1234", "abc123", "StopJob").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckBearerToken("Bearer ", "abc123", "StopJob").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckBearerToken("bearer abc123", "abc123", "StopJob").code(),
            absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace tributary::coordinator
