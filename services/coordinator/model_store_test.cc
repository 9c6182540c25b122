#include "services/coordinator/model_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace tributary::coordinator {
namespace {

using ::testing::HasSubstr;

// Looks like torch.jit.save's archive as far as the store checks.
std::string Archive(const std::string& salt) {
  return std::string("PK\x03\x04", 4) + "net/data.pkl ... net/version ... " + salt;
}

std::string TempDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

absl::StatusOr<v1::UploadModelResponse> UploadIn(ModelStore& store, const std::string& name,
                                                 const std::string& bytes,
                                                 const std::string& digest = "", uint64_t size = 0,
                                                 size_t chunk = 7) {
  absl::StatusOr<std::unique_ptr<ModelStore::Upload>> upload = store.StartUpload();
  if (!upload.ok()) return upload.status();
  v1::ModelFileHeader header;
  header.set_file_name(name);
  header.set_size_bytes(size == 0 ? bytes.size() : size);
  header.set_sha256(digest.empty() ? Sha256Hex(bytes) : digest);
  if (absl::Status s = (*upload)->Header(header); !s.ok()) return s;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    if (absl::Status s = (*upload)->Chunk(bytes.substr(at, chunk)); !s.ok()) return s;
  }
  return (*upload)->Finish();
}

TEST(ModelStoreTest, StoresUnderTheDigestAndServesTheBytes) {
  for (const std::string& dir : {std::string(), TempDir("models")}) {
    SCOPED_TRACE(dir.empty() ? "in memory" : dir);
    ModelStoreOptions options;
    options.directory = dir;
    ModelStore store(options);
    ASSERT_TRUE(store.Open().ok());
    const std::string bytes = Archive("a" + dir);
    absl::StatusOr<v1::UploadModelResponse> stored = UploadIn(store, "net.pt", bytes);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(stored->sha256(), Sha256Hex(bytes));
    EXPECT_EQ(stored->size_bytes(), bytes.size());
    EXPECT_FALSE(stored->already_stored());
    EXPECT_EQ(*store.Size(stored->sha256()), bytes.size());
    EXPECT_EQ(**store.Read(stored->sha256()), bytes);
    // The same file again: nothing new is written.
    absl::StatusOr<v1::UploadModelResponse> again = UploadIn(store, "other-name.pt", bytes);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->already_stored());
    EXPECT_EQ(store.stored_files(), 1u);
    EXPECT_EQ(store.Size(std::string(64, 'b')).status().code(), absl::StatusCode::kNotFound);
    if (!dir.empty()) {
      // A restarted coordinator finds its files.
      ModelStore reopened(options);
      ASSERT_TRUE(reopened.Open().ok());
      EXPECT_EQ(**reopened.Read(stored->sha256()), bytes);
    }
  }
}

TEST(ModelStoreTest, RefusesBadUploadsAndKeepsNothingOfThem) {
  ModelStoreOptions options;
  options.directory = TempDir("refusals");
  options.max_model_bytes = 100;
  ModelStore store(options);
  ASSERT_TRUE(store.Open().ok());
  const std::string good = Archive("x");
  auto error = [&](absl::StatusOr<v1::UploadModelResponse> r) {
    return r.ok() ? std::string("stored") : std::string(r.status().message());
  };
  EXPECT_THAT(error(UploadIn(store, "big.pt", std::string(101, 'x'))),
              HasSubstr("model file big.pt has 101 bytes, more than this coordinator's "
                        "--max_model_bytes (100)"));
  EXPECT_EQ(UploadIn(store, "big.pt", std::string(101, 'x')).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(error(UploadIn(store, "net.pt", good, Sha256Hex("other"))),
              HasSubstr("its bytes have SHA-256"));
  EXPECT_THAT(error(UploadIn(store, "net.pt", good, "", good.size() + 5)),
              HasSubstr("got " + std::to_string(good.size()) + " bytes of the"));
  EXPECT_THAT(error(UploadIn(store, "net.pt", good, "", good.size() - 5)),
              HasSubstr("more than the"));
  EXPECT_THAT(error(UploadIn(store, "../../etc/cron.d/x", good)), HasSubstr("file_name"));
  EXPECT_THAT(error(UploadIn(store, "net.pt", good, "ABC")), HasSubstr("not 64 lowercase hex"));
  EXPECT_THAT(error(UploadIn(store, "weights.pt", "just a pickle of a state_dict")),
              HasSubstr("model file weights.pt: not a TorchScript archive (no zip header)"));
  EXPECT_THAT(error(UploadIn(store, "plain.zip", std::string("PK\x03\x04", 4) + "a.txt")),
              HasSubstr("a zip archive but not a TorchScript one"));
  // Chunks before the header.
  auto upload = store.StartUpload();
  ASSERT_TRUE(upload.ok());
  EXPECT_THAT(std::string((*upload)->Chunk("abc").message()), HasSubstr("must be the header"));
  upload->reset();
  EXPECT_EQ(store.stored_files(), 0u);
  EXPECT_EQ(store.stored_bytes(), 0);
}

TEST(ModelStoreTest, BoundsUploadsInFlightAndTheBytesKept) {
  ModelStoreOptions options;
  options.max_concurrent_uploads = 1;
  options.max_stored_bytes = 60;
  ModelStore store(options);
  ASSERT_TRUE(store.Open().ok());
  {
    auto first = store.StartUpload();
    ASSERT_TRUE(first.ok());
    auto second = store.StartUpload();
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  }
  ASSERT_TRUE(store.StartUpload().ok());  // The first one ended.
  const std::string a = Archive(std::string(10, 'a'));
  ASSERT_TRUE(UploadIn(store, "a.pt", a).ok());
  absl::StatusOr<v1::UploadModelResponse> b =
      UploadIn(store, "b.pt", Archive(std::string(10, 'b')));
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("--max_stored_model_bytes (60"));
  EXPECT_EQ(store.stored_files(), 1u);
}

}  // namespace
}  // namespace tributary::coordinator
