#include "worker/model_fetch.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/sha256.h"

namespace tributary::worker {

absl::StatusOr<std::shared_ptr<const std::string>> FetchModelFile(
    v1::Coordinator::Stub& coordinator, const v1::TorchScriptFile& file, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  v1::FetchModelRequest request;
  request.set_sha256(file.sha256());
  std::unique_ptr<grpc::ClientReader<v1::ModelChunk>> reader =
      coordinator.FetchModel(&context, request);
  auto bytes = std::make_shared<std::string>();
  Sha256 hash;
  v1::ModelChunk chunk;
  uint64_t announced = file.size_bytes();
  while (reader->Read(&chunk)) {
    if (announced == 0) announced = chunk.size_bytes();
    if (chunk.offset() != bytes->size() || chunk.size_bytes() != announced ||
        bytes->size() + chunk.data().size() > announced) {
      context.TryCancel();
      reader->Finish().ok();
      return absl::DataLossError(
          absl::StrCat("model file ", file.file_name(), ": the coordinator sent a chunk at offset ",
                       chunk.offset(), " of ", chunk.data().size(), " bytes for a file of ",
                       announced, " bytes after ", bytes->size(), " bytes"));
    }
    if (bytes->empty()) bytes->reserve(static_cast<size_t>(announced));
    bytes->append(chunk.data());
    hash.Update(chunk.data());
  }
  absl::Status status = FromGrpcStatus(reader->Finish(), "FetchModel");
  if (!status.ok()) return status;
  if (bytes->size() != announced) {
    return absl::DataLossError(absl::StrCat("model file ", file.file_name(), ": got ",
                                            bytes->size(), " of ", announced, " bytes"));
  }
  const std::string digest = hash.HexDigest();
  if (digest != file.sha256()) {
    return absl::DataLossError(absl::StrCat("model file ", file.file_name(),
                                            ": fetched bytes have SHA-256 ", digest,
                                            ", the job names ", file.sha256()));
  }
  return std::shared_ptr<const std::string>(std::move(bytes));
}

}  // namespace tributary::worker
