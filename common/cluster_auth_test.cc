#include "common/cluster_auth.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace tributary {
namespace {

constexpr char kSecret[] = "0123456789abcdef-cluster";

std::shared_ptr<const ClusterAuth> Auth(const std::string& secret = kSecret) {
  return *ClusterAuth::FromSecret(secret);
}

// Metadata views into `storage` (which must outlive them), as gRPC hands them over.
Metadata MetadataOf(const std::vector<std::pair<std::string, std::string>>& storage) {
  Metadata metadata;
  for (const auto& [key, value] : storage) {
    metadata.emplace(grpc::string_ref(key), grpc::string_ref(value));
  }
  return metadata;
}

TEST(ClusterAuthTest, EachRoleIsAcceptedWhereAllowedAndRefusedElsewhere) {
  auto auth = Auth();
  std::vector<std::pair<std::string, std::string>> storage = {
      {kClusterAuthMetadata, auth->HeaderFor(Role::kWorker)}};
  EXPECT_EQ(*auth->Check(MetadataOf(storage), nullptr, OnlyRole(Role::kWorker), "Heartbeat"),
            Role::kWorker);
  absl::StatusOr<Role> refused =
      auth->Check(MetadataOf(storage), nullptr, Role::kCoordinator | Role::kOperator, "Drain");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("Drain: the worker role"), std::string::npos);
}

TEST(ClusterAuthTest, MissingForgedAndForeignCredentialsAreUnauthenticated) {
  auto auth = Auth();
  const std::string worker = auth->HeaderFor(Role::kWorker);
  const std::string forged = "worker " + std::string(64, '0');
  const std::string claimed_role = "coordinator " + worker.substr(worker.find(' ') + 1);
  const std::string foreign = Auth("another-cluster-secret")->HeaderFor(Role::kWorker);
  for (const std::string& header : {std::string(), std::string("worker"), forged, claimed_role,
                                    foreign, std::string("nobody ") + std::string(64, 'a')}) {
    std::vector<std::pair<std::string, std::string>> storage;
    if (!header.empty()) storage.emplace_back(kClusterAuthMetadata, header);
    EXPECT_EQ(auth->Check(MetadataOf(storage), nullptr, kAnyRole, "Heartbeat").status().code(),
              absl::StatusCode::kUnauthenticated)
        << header;
  }
}

TEST(ClusterAuthTest, SecretsAreBoundedAndFileErrorsNameThePathNotTheContents) {
  EXPECT_EQ(ClusterAuth::FromSecret(std::string(15, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ClusterAuth::FromSecret(std::string(16, 'x')).ok());
  EXPECT_TRUE(ClusterAuth::FromSecret(std::string(4096, 'x')).ok());
  EXPECT_EQ(ClusterAuth::FromSecret(std::string(4097, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);

  const std::string dir = ::testing::TempDir();
  absl::Status missing =
      ClusterAuth::FromFile("cluster_token_file", dir + "/absent.token").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("--cluster_token_file=" + dir + "/absent.token"),
            std::string::npos);

  const std::string short_path = dir + "/short.token";
  std::ofstream(short_path) << "tiny-secret\n";
  absl::Status short_secret = ClusterAuth::FromFile("cluster_token_file", short_path).status();
  EXPECT_EQ(short_secret.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(short_secret.message().find("tiny-secret"), std::string::npos);

  // Surrounding whitespace (a trailing newline) is not part of the secret.
  const std::string path = dir + "/good.token";
  std::ofstream(path) << "  " << kSecret << "\n";
  auto from_file = *ClusterAuth::FromFile("cluster_token_file", path);
  EXPECT_EQ(from_file->HeaderFor(Role::kOperator), Auth()->HeaderFor(Role::kOperator));
}

}  // namespace
}  // namespace tributary
