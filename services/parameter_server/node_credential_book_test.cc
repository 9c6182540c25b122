#include "services/parameter_server/node_credential_book.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/issued_credentials.h"

namespace tributary::ps {
namespace {

using ::testing::HasSubstr;

v1::BeginGenerationRequest Begin(const CredentialIssuer& issuer, const std::string& job,
                                 uint64_t generation, uint32_t nodes) {
  v1::BeginGenerationRequest request;
  request.set_job_id(job);
  request.set_generation(generation);
  request.set_num_nodes(nodes);
  for (uint32_t rank = 0; rank < nodes; ++rank) {
    request.add_node_credential_sha256(CredentialDigest(issuer.Node(job, generation, rank)));
  }
  return request;
}

TEST(NodeCredentialBookTest, OnlyTheNodesOwnCredentialSpeaksForIt) {
  const CredentialIssuer issuer(std::string(32, 'k'));
  NodeCredentialBook book;
  ASSERT_TRUE(book.Note(Begin(issuer, "job-1", 3, 2)).ok());
  EXPECT_TRUE(book.Check(issuer.Node("job-1", 3, 0), "job-1", 3, 0, "PushPull").ok());
  EXPECT_TRUE(book.Check(issuer.Node("job-1", 3, 1), "job-1", 3, 1, "PushPull").ok());
  EXPECT_EQ(book.NumNodes("job-1", 3), 2u);

  // Node 1's credential claiming node 0, none, one made with another key (what a
  // holder of the cluster secret could make), and a digest presented as a credential.
  const CredentialIssuer forger(std::string(32, 'f'));
  for (const std::string& presented :
       {issuer.Node("job-1", 3, 1), std::string(), forger.Node("job-1", 3, 0),
        CredentialDigest(issuer.Node("job-1", 3, 0))}) {
    const absl::Status refused = book.Check(presented, "job-1", 3, 0, "PushPull");
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << presented;
    EXPECT_THAT(refused.message(),
                HasSubstr("PushPull: the caller is not node 0 of generation 3 of job job-1"));
  }
}

TEST(NodeCredentialBookTest, RanksOutsideTheGenerationAreRefusedNamingItsSize) {
  const CredentialIssuer issuer(std::string(32, 'k'));
  NodeCredentialBook book;
  ASSERT_TRUE(book.Note(Begin(issuer, "job-1", 3, 2)).ok());
  for (uint32_t rank : {2u, 299u, 0xffffffffu}) {
    const absl::Status refused =
        book.Check(issuer.Node("job-1", 3, rank), "job-1", 3, rank, "OpenDataPlane");
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << rank;
    EXPECT_THAT(refused.message(), HasSubstr("that generation has 2 nodes (ranks 0..1)"));
  }
}

TEST(NodeCredentialBookTest, UnknownGenerationsAreNotYetBegunOrOver) {
  const CredentialIssuer issuer(std::string(32, 'k'));
  NodeCredentialBook book;
  const absl::Status none = book.Check(issuer.Node("job-1", 1, 0), "job-1", 1, 0, "InitPartitions");
  EXPECT_EQ(none.code(), absl::StatusCode::kUnavailable) << none;
  EXPECT_THAT(none.message(), HasSubstr("has not begun that generation on this shard yet"));
  for (uint64_t generation = 1; generation <= 10; ++generation) {
    ASSERT_TRUE(book.Note(Begin(issuer, "job-1", generation, 1)).ok());
  }
  const absl::Status future = book.Check(issuer.Node("job-1", 11, 0), "job-1", 11, 0, "PushPull");
  EXPECT_EQ(future.code(), absl::StatusCode::kUnavailable) << future;
  EXPECT_THAT(future.message(), HasSubstr("(newest: 10)"));
  // Only the newest few are kept; older ones are over.
  const absl::Status old = book.Check(issuer.Node("job-1", 2, 0), "job-1", 2, 0, "PushPull");
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition) << old;
  EXPECT_THAT(old.message(), HasSubstr("generation 2 is over on this shard (newest: 10)"));
  EXPECT_TRUE(book.Check(issuer.Node("job-1", 7, 0), "job-1", 7, 0, "PushPull").ok());
  // A generation of another job.
  const absl::Status other = book.Check(issuer.Node("job-2", 10, 0), "job-2", 10, 0, "PushPull");
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition) << other;
  EXPECT_THAT(other.message(), HasSubstr("generation 10 is of job job-1"));
}

TEST(NodeCredentialBookTest, ABeginGenerationMustCarryOneDigestPerNode) {
  const CredentialIssuer issuer(std::string(32, 'k'));
  NodeCredentialBook book;
  v1::BeginGenerationRequest missing = Begin(issuer, "job-1", 3, 2);
  missing.mutable_node_credential_sha256()->RemoveLast();
  const absl::Status short_list = book.Note(missing);
  EXPECT_EQ(short_list.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_list.message(), HasSubstr("node_credential_sha256 has 1 digests for 2 nodes"));
  v1::BeginGenerationRequest bad = Begin(issuer, "job-1", 3, 2);
  bad.set_node_credential_sha256(1, "not a digest");
  const absl::Status malformed = book.Note(bad);
  EXPECT_EQ(malformed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(malformed.message(), HasSubstr("node_credential_sha256[1] is not 64 lowercase hex"));
  EXPECT_EQ(book.NumNodes("job-1", 3), 0u) << "nothing of a refused request is kept";
  // A fence carries none and notes nothing.
  v1::BeginGenerationRequest fence;
  fence.set_job_id("job-1");
  fence.set_generation(4);
  fence.set_num_nodes(2);
  fence.set_fence(true);
  EXPECT_TRUE(book.Note(fence).ok());
  EXPECT_EQ(book.NumNodes("job-1", 4), 0u);
}

}  // namespace
}  // namespace tributary::ps
