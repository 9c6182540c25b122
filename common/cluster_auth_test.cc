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

TEST(ClusterAuthTest, NodeCredentialsBindJobGenerationAndRank) {
  auto auth = Auth();
  const std::string credential = auth->NodeCredential("job-1", 3, 1);
  EXPECT_TRUE(auth->CheckNodeCredential(credential, "job-1", 3, 1, "PushPull").ok());
  for (auto [job, generation, rank] : {std::tuple<std::string, uint64_t, uint32_t>{"job-2", 3, 1},
                                       {"job-1", 4, 1},
                                       {"job-1", 3, 0}}) {
    absl::Status refused = auth->CheckNodeCredential(credential, job, generation, rank, "PushPull");
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_NE(refused.message().find("PushPull: the caller is not node"), std::string::npos);
  }
  std::vector<std::pair<std::string, std::string>> none;
  EXPECT_EQ(auth->CheckNode(MetadataOf(none), "job-1", 3, 1, "PushPull").code(),
            absl::StatusCode::kPermissionDenied);
  // Another secret makes other credentials.
  EXPECT_NE(Auth("another-cluster-secret")->NodeCredential("job-1", 3, 1), credential);
}

TEST(ClusterAuthTest, WorkerCredentialsBindTheWorkerId) {
  auto auth = Auth();
  std::vector<std::pair<std::string, std::string>> storage = {
      {kWorkerCredentialMetadata, auth->WorkerCredential("w1-abc")}};
  EXPECT_TRUE(auth->CheckWorker(MetadataOf(storage), "w1-abc", "Heartbeat").ok());
  absl::Status other = auth->CheckWorker(MetadataOf(storage), "w2-abc", "Heartbeat");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("Heartbeat: the caller is not worker 'w2-abc'"),
            std::string::npos);
  std::vector<std::pair<std::string, std::string>> none;
  EXPECT_EQ(auth->CheckWorker(MetadataOf(none), "w1-abc", "Deregister").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_NE(auth->WorkerCredential("w1-abc"), auth->NodeCredential("w1-abc", 0, 0));
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
