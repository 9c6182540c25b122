#include "common/stream_deadlines.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace tributary {

StreamDeadlines::StreamDeadlines(std::string what, const Clock* clock, absl::Duration total,
                                 absl::Duration idle)
    : what_(std::move(what)), clock_(clock), total_(total), idle_(idle) {}

void StreamDeadlines::Add(const void* stream, grpc::CallbackServerContext* context,
                          std::function<void(const std::string& why)> expire) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  open_[stream] = Open{now, now, context, std::move(expire), false};
}

void StreamDeadlines::Touch(const void* stream) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto found = open_.find(stream);
  if (found != open_.end()) found->second.last_message = now;
}

void StreamDeadlines::Remove(const void* stream) {
  absl::MutexLock lock(&mu_);
  open_.erase(stream);
}

int StreamDeadlines::Expire() {
  const absl::Time now = clock_->Now();
  int expired = 0;
  absl::MutexLock lock(&mu_);
  for (auto& [stream, open] : open_) {
    if (open.cancelled) continue;
    const bool too_long = now - open.since >= total_;
    const bool idle = now - open.last_message >= idle_;
    if (!too_long && !idle) continue;
    const std::string why = absl::StrCat(
        what_, ": open for ", absl::FormatDuration(now - open.since),
        too_long ? absl::StrCat(" (the limit is ", absl::FormatDuration(total_), ")")
                 : absl::StrCat(", silent for ", absl::FormatDuration(now - open.last_message),
                                " (the limit is ", absl::FormatDuration(idle_), ")"));
    LOG(WARNING) << why << "; from " << open.context->peer() << ": ended, what it sent freed";
    if (open.expire) {
      open.expire(why);
    } else {
      open.context->TryCancel();
    }
    open.cancelled = true;
    ++expired;
  }
  return expired;
}

size_t StreamDeadlines::size() const {
  absl::MutexLock lock(&mu_);
  return open_.size();
}

}  // namespace tributary
