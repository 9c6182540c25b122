#include "common/issued_credentials.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace tributary {
namespace {

TEST(CredentialIssuerTest, NodeCredentialsBindJobGenerationAndRank) {
  const CredentialIssuer issuer(std::string(32, 'k'));
  const std::string credential = issuer.Node("job-1", 3, 1);
  EXPECT_EQ(credential.size(), 64u);
  EXPECT_EQ(issuer.Node("job-1", 3, 1), credential) << "the same key gives the same credential";
  for (auto [job, generation, rank] : {std::tuple<std::string, uint64_t, uint32_t>{"job-2", 3, 1},
                                       {"job-1", 4, 1},
                                       {"job-1", 3, 0}}) {
    EXPECT_NE(issuer.Node(job, generation, rank), credential) << job << generation << rank;
  }
  EXPECT_NE(CredentialIssuer(std::string(32, 'j')).Node("job-1", 3, 1), credential);
}

TEST(CredentialIssuerTest, WorkerCredentialsBindTheWorkerId) {
  const CredentialIssuer issuer(std::string(32, 'k'));
  EXPECT_TRUE(issuer.CheckWorker(issuer.Worker("w1-abc"), "w1-abc", "Heartbeat").ok());
  const absl::Status other = issuer.CheckWorker(issuer.Worker("w1-abc"), "w2-abc", "Heartbeat");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("Heartbeat: the caller is not worker 'w2-abc' (a wrong"),
            std::string::npos)
      << other;
  const absl::Status none = issuer.CheckWorker("", "w1-abc", "Deregister");
  EXPECT_EQ(none.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(none.message().find("(no 'x-tributary-worker'"), std::string::npos) << none;
  EXPECT_NE(issuer.Worker("w1-abc"), issuer.Node("w1-abc", 0, 0));
}

TEST(CredentialIssuerTest, RandomKeysDiffer) {
  // A restarted coordinator (or a process that only knows the cluster secret) cannot
  // make the credentials another one issued.
  std::set<std::string> seen;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<CredentialIssuer> issuer = CredentialIssuer::Random();
    ASSERT_TRUE(issuer.ok()) << issuer.status();
    seen.insert(issuer->Node("job-1", 1, 0));
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(CredentialDigestTest, IsTheSha256OfTheCredential) {
  EXPECT_EQ(CredentialDigest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abcd"));
}

}  // namespace
}  // namespace tributary
