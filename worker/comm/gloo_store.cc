#include "worker/comm/gloo_store.h"

#include <gloo/common/error.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace tributary::worker {
namespace {

[[noreturn]] void Throw(const absl::Status& status) {
  throw gloo::IoException(std::string(status.message()));
}

}  // namespace

KvGlooStore::KvGlooStore(RendezvousClient& client, std::string prefix,
                         std::chrono::milliseconds default_timeout)
    : client_(client), prefix_(std::move(prefix)), default_timeout_(default_timeout) {}

std::string KvGlooStore::Scoped(const std::string& key) const {
  return absl::StrCat(prefix_, "/", key);
}

void KvGlooStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = client_.Publish(Scoped(key), std::string(data.begin(), data.end()));
  if (!status.ok()) Throw(status);
}

std::vector<char> KvGlooStore::get(const std::string& key) {
  absl::StatusOr<std::vector<std::string>> values =
      client_.Wait({Scoped(key)}, absl::FromChrono(default_timeout_));
  if (!values.ok()) Throw(values.status());
  const std::string& value = values->front();
  return std::vector<char>(value.begin(), value.end());
}

void KvGlooStore::wait(const std::vector<std::string>& keys) { wait(keys, default_timeout_); }

void KvGlooStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  std::vector<std::string> scoped;
  scoped.reserve(keys.size());
  for (const std::string& key : keys) scoped.push_back(Scoped(key));
  absl::StatusOr<std::vector<std::string>> values =
      client_.Wait(scoped, absl::FromChrono(timeout));
  if (!values.ok()) Throw(values.status());
}

}  // namespace tributary::worker
