#include "services/parameter_server/data_plane.h"

#include <arpa/inet.h>
#include <glog/logging.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/data_plane_wire.h"
#include "common/partition_codec.h"
#include "common/secure_random.h"
#include "common/shared_region.h"
#include "common/thread_name.h"
#include "common/thread_slice.h"
#include "services/parameter_server/push_book.h"

namespace tributary::ps {

namespace dp = ::tributary::data_plane;

namespace {

// Whether the peer has sent nothing more yet: a reader that would only wait for the
// next frame may as well sum the push it holds itself.
bool NothingMoreToRead(int fd) {
  int pending = 0;
  return ::ioctl(fd, FIONREAD, &pending) == 0 && pending == 0;
}

}  // namespace

// One admitted connection: a reader thread (hello, then pushes into reused slots, each
// handed to the partition's executor lane as on the gRPC stream, or summed by the
// reader itself when the peer sent nothing after it) and a writer thread (the values
// the shard delivers, then the stream's final status). Updates that a push completes
// for connections with a shared region are written by the thread that ran the push,
// once the shard returned (its own connection's always, others' up to
// kInlineAnswerBytes in all): no hand-off to a writer on a step's critical path. All
// state is under mu_; the shard calls the NodeSink methods with its own locks held, so
// they only queue and return.
class DataPlaneServer::Session final : public NodeSink {
 public:
  Session(DataPlaneServer* server, int fd, bool local)
      : server_(server), fd_(fd), local_(local) {
    for (Slot& slot : slots_) book_.Free(&slot);
  }
  ~Session() override { ::close(fd_); }

  void Start() {
    reader_ = std::thread([this] {
      NameHandoffThread("shard-read");
      ReadLoop();
    });
  }

  // Ends the stream with `status`: the writer sends it, the reader stops reading.
  void Stop(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      EndLocked(status);
    }
    ::shutdown(fd_, SHUT_RD);
  }

  // Closes the socket both ways (a peer that does not read its last frames).
  void Cut() { ::shutdown(fd_, SHUT_RDWR); }

  // Whether the peer still owes its hello, and was not evicted for it yet.
  bool Unadmitted() const { return owes_hello_.load() && !evicted_.load(); }
  absl::Time accepted() const { return accepted_; }
  // Makes room for a newer connection: this one has owed its hello the longest.
  void Evict() {
    evicted_ = true;
    Cut();
  }

  bool Finished() {
    absl::MutexLock lock(&mu_);
    return reader_done_ && writer_done_ && tasks_ == 0;
  }

  // Waits for the threads and the executor tasks (after Stop or Finished).
  void Join() {
    if (reader_.joinable()) reader_.join();
    if (writer_.joinable()) writer_.join();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* tasks) { return *tasks == 0; }, &tasks_));
  }

  // NodeSink -----------------------------------------------------------------------

  void Deliver(std::shared_ptr<const v1::PartitionValues> values) override {
    absl::MutexLock lock(&mu_);
    if (ending()) return;
    book_.Delivered(values->partition_id(), values->step());
    if (PendingAnswers* pending = pending_answers_;
        pending != nullptr && region_.mapped() &&
        (pending->session == this ||
         pending->bytes + values->data().size() <= kInlineAnswerBytes)) {
      // RunPush writes it (AnswerPending); this connection stays until it did.
      pending->bytes += values->data().size();
      ++tasks_;
      pending->answers.emplace_back(this, std::move(values));
      return;
    }
    writes_.push_back(std::move(values));
  }

  void Retry(uint32_t partition_id) override {
    Slot* push;
    {
      absl::MutexLock lock(&mu_);
      push = book_.TakeHeld(partition_id, ending());
      if (push == nullptr) return;
      ++tasks_;
    }
    Schedule(push);
  }

  void End(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    EndLocked(status);
  }

 private:
  static constexpr int kReadSlots = 4;  // Pushes being summed while the next arrive.
  static constexpr size_t kMaxAnswers = 1 << 16;  // Places for updates in the region.
  // What a push's thread copies into other connections' regions (a few partitions'
  // worth): beyond it their writers copy in parallel.
  static constexpr uint64_t kInlineAnswerBytes = 4 << 20;

  // The values the shard delivered during one RunPush to connections with a region,
  // for that thread to write once the shard returned.
  struct PendingAnswers {
    const Session* session = nullptr;  // Whose push runs.
    uint64_t bytes = 0;                // Of other connections' values taken.
    std::vector<std::pair<Session*, std::shared_ptr<const v1::PartitionValues>>> answers;
  };
  static thread_local PendingAnswers* pending_answers_;

  struct Slot {
    ReceivedMessage received;  // received.bytes holds the frame's payload.
    GradientPushView push;
    // A push whose data lies in the shared region: where its answer may be written.
    bool shared = false;
    uint64_t answer_offset = 0;
    uint64_t answer_capacity = 0;
  };
  // Where the next update of a partition may be written in the shared region.
  struct Answer {
    uint64_t offset = 0;
    uint64_t capacity = 0;
  };

  bool ending() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return end_status_.has_value(); }

  void EndLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending()) return;
    if (!status.ok() && !absl::IsFailedPrecondition(status)) {
      LOG(WARNING) << Name() << " ends: " << status;
    }
    end_status_ = status;
    writes_.clear();  // Queued values are dropped; the one being written is the writer's.
  }

  std::string Name() const {
    return absl::StrCat(local_ ? "local data plane connection " : "data plane connection ", fd_);
  }

  void ReadLoop() {
    const std::optional<Binding> binding = Admit();
    if (!binding.has_value()) {  // Admit logged why.
      absl::MutexLock lock(&mu_);
      end_status_ = absl::UnauthenticatedError("not admitted");
      reader_done_ = true;
      writer_done_ = true;
      return;
    }
    const uint64_t max_frame = server_->max_frame_bytes();
    // The local lane's first frame may hand over a shared region: answered here,
    // before the writer runs. Any other first frame is read as usual below.
    std::optional<dp::FrameHeader> pending;
    absl::Status taken = absl::OkStatus();
    if (local_) {
      absl::StatusOr<std::optional<dp::FrameHeader>> first = TakeRegion(max_frame);
      if (first.ok()) {
        pending = *first;
      } else {
        taken = first.status();
      }
    }
    writer_ = std::thread([this] {
      NameHandoffThread("shard-write");
      WriteLoop();
    });
    bool peer_closed = false;
    while (true) {
      Slot* slot;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &Session::SlotOrEnd));
        if (ending()) break;
        slot = book_.TakeFree();
      }
      absl::Status status = taken;
      if (status.ok()) {
        status = ReadPush(*slot, max_frame, *binding, pending ? &*pending : nullptr);
      }
      taken = absl::OkStatus();
      pending.reset();
      bool schedule = false;
      bool sum_here = false;
      const bool idle = status.ok() && NothingMoreToRead(fd_);
      {
        absl::MutexLock lock(&mu_);
        // At most one place per partition id, and kMaxAnswers in all (the ids come
        // from the frames: a push for a partition the shard does not own ends the
        // connection, and an update past the bound is answered inline).
        if (status.ok() && slot->shared &&
            (answers_.size() < kMaxAnswers || answers_.contains(slot->push.partition_id))) {
          answers_[slot->push.partition_id] = Answer{slot->answer_offset, slot->answer_capacity};
        }
        if (!status.ok()) {
          book_.Free(slot);
          if (absl::IsOutOfRange(status)) {
            peer_closed = true;  // A clean end: finish once every push has its values.
          } else {
            EndLocked(status);
          }
        } else if (ending()) {
          book_.Free(slot);
        } else {
          // Nothing more to read and none of this connection's pushes with the
          // executor: summing it here saves waking a lane (the step's last push
          // above all), and keeps this connection's pushes in order.
          sum_here = idle && tasks_ == 0;
          ++tasks_;
          schedule = true;
        }
      }
      if (!schedule) break;
      if (sum_here) {
        RunPush(slot);
      } else {
        Schedule(slot);
      }
    }
    {
      absl::MutexLock lock(&mu_);
      if (peer_closed) {
        mu_.Await(absl::Condition(this, &Session::DrainedOrEnd));
        EndLocked(absl::OkStatus());
      }
    }
    if (!peer_closed) Discard();
    absl::MutexLock lock(&mu_);
    reader_done_ = true;
  }

  // The local lane's step before the hello: the client names its ticket by digest and
  // the shard proves it issued it. A request for no outstanding ticket is closed
  // unanswered (the client then tries TCP, where its hello gets the refusal).
  absl::Status ProveLocal(absl::Time deadline) {
    char request[dp::kLocalRequestBytes];
    absl::Status read =
        dp::ReadFullBefore(fd_, request, sizeof(request), deadline, "local data plane request");
    if (!read.ok()) return read;
    std::string digest, challenge;
    if (absl::Status parsed = dp::ParseLocalRequest(request, &digest, &challenge); !parsed.ok()) {
      return parsed;
    }
    absl::StatusOr<std::string> proof = server_->ProveLocal(digest, challenge);
    if (!proof.ok()) return proof.status();
    iovec piece = {proof->data(), proof->size()};
    return dp::WriteAll(fd_, &piece, 1, "local data plane proof");
  }

  // The hello and its ticket; answers it with a status frame.
  std::optional<Binding> Admit() {
    // One deadline for the whole hello (and the local lane's proof before it):
    // trickling bytes does not extend it.
    const absl::Time deadline = absl::Now() + server_->options_.hello_timeout;
    char hello[dp::kHelloBytes];
    absl::Status read = local_ ? ProveLocal(deadline) : absl::OkStatus();
    if (read.ok()) {
      read = dp::ReadFullBefore(fd_, hello, sizeof(hello), deadline, "data plane hello");
    }
    owes_hello_ = false;
    if (!read.ok() && evicted_.load()) {
      read = absl::ResourceExhaustedError(absl::StrCat(
          "data plane hello: evicted after ", absl::FormatDuration(absl::Now() - accepted_),
          " for a newer connection (", server_->options_.max_unadmitted,
          " connections owed their hello)"));
    }
    absl::StatusOr<Binding> binding = absl::UnavailableError("no hello");
    if (!read.ok()) {
      binding = read;
    } else if (absl::StatusOr<std::string> ticket = dp::ParseHello(hello); !ticket.ok()) {
      binding = ticket.status();
    } else {
      binding = server_->Redeem(*ticket);
    }
    if (!binding.ok()) {
      server_->Refused(local_);
      LOG(WARNING) << Name() << " refused: " << binding.status();
      if (read.ok()) dp::WriteStatusFrame(fd_, binding.status()).IgnoreError();
      return std::nullopt;
    }
    if (!dp::WriteStatusFrame(fd_, absl::OkStatus()).ok()) return std::nullopt;
    server_->admitted_[local_ ? 1 : 0]->Increment();
    return *std::move(binding);
  }

  bool SlotOrEnd() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ending() || book_.HasFree();
  }
  bool DrainedOrEnd() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ending() || (tasks_ == 0 && book_.Answered() && writes_.empty() && tail_.empty() &&
                        !writing_);
  }
  bool WorkOrEnd() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ending() || (!writing_ && (!tail_.empty() || !writes_.empty()));
  }
  bool NotWriting() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !writing_; }

  // The answer to a push that named a place for it in the region, once, when the
  // values fit there.
  std::optional<Answer> TakeAnswerLocked(const v1::PartitionValues& values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = answers_.find(values.partition_id());
    if (it == answers_.end() || values.data().empty() ||
        values.data().size() > it->second.capacity) {
      return std::nullopt;
    }
    const Answer answer = it->second;
    answers_.erase(it);
    return answer;
  }

  // An update placed in the region: the frame that says where, in three pieces.
  struct PlacedAnswer {
    std::array<char, dp::kFrameHeaderBytes> frame;
    std::array<char, dp::kSharedPrefixBytes> prefix;
    std::string head;
    std::array<iovec, 3> Pieces() {
      return {iovec{frame.data(), frame.size()}, iovec{prefix.data(), prefix.size()},
              iovec{head.data(), head.size()}};
    }
  };

  // Copies the values into their place in the region.
  PlacedAnswer PlaceAnswer(const v1::PartitionValues& values, const Answer& answer) {
    const std::string& data = values.data();
    std::memcpy(region_.data() + answer.offset, data.data(), data.size());
    dp::SharedPlace place;
    place.offset = answer.offset;
    place.size = data.size();
    PlacedAnswer placed;
    placed.prefix = dp::EncodeSharedPlace(place);
    placed.head = PartitionValuesHead(values);
    placed.frame = dp::EncodeFrameHeader(dp::kShared, placed.prefix.size() + placed.head.size());
    return placed;
  }

  // Values Deliver left to a push's thread (PendingAnswers), written on that thread.
  // The writer's instead when it is writing or holds an update of the same partition
  // (updates of a partition go out in order) or when the values have no place in the
  // region. The frame goes out without blocking: what the socket does not take now is
  // left to the writer (tail_), so a peer that stops reading stalls only its writer.
  void AnswerPending(std::shared_ptr<const v1::PartitionValues> values) {
    std::optional<Answer> answer;
    {
      // Deliver counted a task for it: `this` stays until it is written or handed on.
      absl::MutexLock lock(&mu_);
      if (ending()) {
        --tasks_;
        return;
      }
      bool behind = writing_ || !tail_.empty();
      for (const auto& queued : writes_) {
        behind |= queued->partition_id() == values->partition_id();
      }
      if (!behind) answer = TakeAnswerLocked(*values);
      if (!answer.has_value()) {
        writes_.push_back(std::move(values));
        --tasks_;
        return;
      }
      writing_ = true;
    }
    PlacedAnswer placed = PlaceAnswer(*values, *answer);
    std::array<iovec, 3> pieces = placed.Pieces();
    iovec* left = pieces.data();
    int count = static_cast<int>(pieces.size());
    absl::Status written;
    msghdr message{};
    message.msg_iov = left;
    message.msg_iovlen = pieces.size();
    ssize_t sent;
    do {
      sent = ::sendmsg(fd_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      written = absl::UnavailableError(absl::StrCat("PushPull values: ", std::strerror(errno)));
    }
    dp::SkipSent(&left, &count, sent < 0 ? 0 : static_cast<size_t>(sent));
    std::string rest;
    for (int i = 0; i < count && written.ok(); ++i) {
      rest.append(static_cast<const char*>(left[i].iov_base), left[i].iov_len);
    }
    absl::MutexLock lock(&mu_);
    writing_ = false;
    tail_ = std::move(rest);
    if (!written.ok()) EndLocked(written);
    --tasks_;
  }

  // The local lane's first frame: a region handed over (mapped and answered with a
  // status frame; nothing pending then) or the header of any other frame (pending).
  absl::StatusOr<std::optional<dp::FrameHeader>> TakeRegion(uint64_t max_frame) {
    char bytes[dp::kFrameHeaderBytes];
    int passed = -1;
    absl::Status read = ReadWithDescriptor(fd_, bytes, sizeof(bytes), &passed, "PushPull");
    absl::StatusOr<dp::FrameHeader> header =
        read.ok() ? dp::ParseFrameHeader(bytes, max_frame, "PushPull") : read;
    if (!header.ok() || header->kind != dp::kRegion) {
      if (passed >= 0) ::close(passed);
      if (!header.ok()) return header.status();
      return std::optional<dp::FrameHeader>(*header);
    }
    char size_bytes[dp::kRegionPayloadBytes];
    read = header->length == sizeof(size_bytes)
               ? dp::ReadFull(fd_, size_bytes, sizeof(size_bytes), "PushPull region")
               : absl::InvalidArgumentError(absl::StrCat("PushPull: a region frame of ",
                                                         header->length, " bytes (expected ",
                                                         dp::kRegionPayloadBytes, ")"));
    if (!read.ok()) {
      if (passed >= 0) ::close(passed);
      return absl::IsOutOfRange(read) ? absl::UnavailableError(read.message()) : read;
    }
    const uint64_t size = dp::ParseRegionSize(size_bytes);
    absl::StatusOr<SharedRegion> region =
        passed < 0 ? absl::InvalidArgumentError("PushPull: a region frame without a descriptor")
                   : SharedRegion::Map(passed, size, server_->options_.max_shared_region_bytes);
    absl::Status answer = region.status();
    if (region.ok()) {
      region_ = *std::move(region);
      server_->shared_regions_->Increment();
    } else {
      // Refused: said so, and the lane goes on without it.
      LOG(WARNING) << Name() << ": shared region refused: " << answer;
    }
    if (absl::Status answered = dp::WriteStatusFrame(fd_, answer); !answered.ok()) {
      return answered;
    }
    return std::optional<dp::FrameHeader>();
  }

  // One frame into `slot` (its header read already when `pending`), decoded and
  // checked against the connection's binding.
  absl::Status ReadPush(Slot& slot, uint64_t max_frame, const Binding& binding,
                        const dp::FrameHeader* pending) {
    absl::StatusOr<dp::FrameHeader> header =
        pending != nullptr ? *pending : dp::ReadFrameHeader(fd_, max_frame, "PushPull");
    if (!header.ok()) return header.status();
    if (header->kind != dp::kMessage && header->kind != dp::kShared) {
      return absl::InvalidArgumentError(
          absl::StrCat("PushPull: a client sent a frame of kind ", header->kind,
                       header->kind == dp::kRegion ? " (a region, after its first frame)" : ""));
    }
    std::vector<char>& bytes = slot.received.bytes;
    bytes.resize(header->length);  // Capacity kept from push to push.
    if (absl::Status read = dp::ReadFull(fd_, bytes.data(), bytes.size(), "PushPull");
        !read.ok()) {
      return absl::IsOutOfRange(read) ? absl::UnavailableError(read.message()) : read;
    }
    slot.shared = header->kind == dp::kShared;
    absl::Status decoded =
        slot.shared ? DecodeShared(slot)
                    : DecodeGradientPush(absl::string_view(bytes.data(), bytes.size()),
                                         &slot.received, &slot.push);
    if (!decoded.ok()) return decoded;
    const GradientPushView& push = slot.push;
    if (push.job_id != binding.job_id || push.generation != binding.generation ||
        push.node_rank != binding.node_rank) {
      return absl::PermissionDeniedError(absl::StrCat(
          "PushPull: this connection speaks for node ", binding.node_rank, " of generation ",
          binding.generation, " of job ", binding.job_id, "; a push claimed node ",
          push.node_rank, " of generation ", push.generation, " of job ", push.job_id));
    }
    return absl::OkStatus();
  }

  // A kShared push: its head in the slot's bytes, its data in the region.
  absl::Status DecodeShared(Slot& slot) {
    const std::vector<char>& bytes = slot.received.bytes;
    if (!region_.mapped()) {
      return absl::InvalidArgumentError(
          "PushPull: a shared frame on a connection without a shared region");
    }
    if (bytes.size() < dp::kSharedPrefixBytes) {
      return absl::InvalidArgumentError(absl::StrCat("PushPull: a shared frame of ", bytes.size(),
                                                     " bytes (at least ",
                                                     dp::kSharedPrefixBytes, ")"));
    }
    const dp::SharedPlace place = dp::ParseSharedPlace(bytes.data());
    if (!region_.Holds(place.offset, place.size) ||
        !region_.Holds(place.answer_offset, place.answer_capacity)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PushPull: a shared push at [", place.offset, ", +", place.size,
          ") answered at [", place.answer_offset, ", +", place.answer_capacity,
          ") does not lie in the region of ", region_.size(), " bytes"));
    }
    slot.answer_offset = place.answer_offset;
    slot.answer_capacity = place.answer_capacity;
    return DecodeGradientPush(
        absl::string_view(bytes.data() + dp::kSharedPrefixBytes,
                          bytes.size() - dp::kSharedPrefixBytes),
        absl::string_view(region_.data() + place.offset, place.size), &slot.received,
        &slot.push);
  }

  // After an error: reads what the peer still sends (so that closing does not reset
  // the connection before it read our status), for a bounded time.
  void Discard() {
    dp::SetReceiveTimeout(fd_, absl::Seconds(2));
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    char scratch[1 << 16];
    while (absl::Now() < give_up) {
      const ssize_t got = ::recv(fd_, scratch, sizeof(scratch), 0);
      if (got > 0 || (got < 0 && errno == EINTR)) continue;
      break;
    }
  }

  void WriteLoop() {
    absl::Status final_status;
    std::string tail;  // The rest of a frame a push's thread began (AnswerPending).
    while (true) {
      std::shared_ptr<const v1::PartitionValues> values;
      std::optional<Answer> answer;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &Session::WorkOrEnd));
        if (ending()) {
          // A frame being written by a push's thread is finished first.
          mu_.Await(absl::Condition(this, &Session::NotWriting));
          final_status = *end_status_;
          tail = std::move(tail_);
          break;
        }
        writing_ = true;
        if (!tail_.empty()) {
          tail = std::move(tail_);
          tail_.clear();
        } else {
          values = std::move(writes_.front());
          writes_.pop_front();
          answer = TakeAnswerLocked(*values);
        }
      }
      absl::Status written;
      if (values == nullptr) {
        iovec piece = {tail.data(), tail.size()};
        written = dp::WriteAll(fd_, &piece, 1, "PushPull values");
        tail.clear();
      } else if (answer.has_value()) {
        PlacedAnswer placed = PlaceAnswer(*values, *answer);
        std::array<iovec, 3> pieces = placed.Pieces();
        written = dp::WriteAll(fd_, pieces.data(), 3, "PushPull values");
      } else {
        std::string head = PartitionValuesHead(*values);
        const std::string& data = values->data();
        auto frame = dp::EncodeFrameHeader(dp::kMessage, head.size() + data.size());
        iovec pieces[3] = {{frame.data(), frame.size()},
                           {head.data(), head.size()},
                           {const_cast<char*>(data.data()), data.size()}};
        written = dp::WriteAll(fd_, pieces, data.empty() ? 2 : 3, "PushPull values");
      }
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!written.ok()) EndLocked(written);
    }
    // A frame cut short would garble the status after it.
    bool framed = true;
    if (!tail.empty()) {
      iovec piece = {tail.data(), tail.size()};
      framed = dp::WriteAll(fd_, &piece, 1, "PushPull values").ok();
    }
    if (framed) dp::WriteStatusFrame(fd_, final_status).IgnoreError();
    ::shutdown(fd_, SHUT_WR);
    // The reader ends when the peer closes; a peer that does not is cut off.
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&reader_done_), absl::Seconds(5))) {
      ::shutdown(fd_, SHUT_RD);
    }
    writer_done_ = true;
  }

  void Schedule(Slot* push) {
    server_->executor_->Submit(push->push.partition_id, [this, push] { RunPush(push); });
  }

  void RunPush(Slot* push) {
    const GradientPushView& view = push->push;
    const uint32_t partition = view.partition_id;
    bool skip;
    {
      absl::MutexLock lock(&mu_);
      skip = ending();
      if (!skip) book_.Started(partition, view.step);
    }
    absl::StatusOr<PushResult> result = PushResult::kDuplicate;
    PendingAnswers pending;
    if (!skip) {
      pending.session = this;
      pending_answers_ = &pending;
      result = server_->shard_->Push(view, this);
      pending_answers_ = nullptr;
    }
    for (auto& [session, values] : pending.answers) session->AnswerPending(std::move(values));
    absl::MutexLock lock(&mu_);
    if (absl::Status refused = book_.Settle(push, partition, !skip, result); !refused.ok()) {
      EndLocked(refused);
    }
    --tasks_;
  }

  DataPlaneServer* const server_;
  const int fd_;
  const bool local_;  // On the local (Unix socket) lane.
  const absl::Time accepted_ = absl::Now();
  std::atomic<bool> owes_hello_{true};
  std::atomic<bool> evicted_{false};
  std::thread reader_;
  std::thread writer_;

  // Mapped by the reader before the writer starts, then unchanged until destruction
  // (after every executor task that reads a push in it ended).
  SharedRegion region_;

  absl::Mutex mu_;
  Slot slots_[kReadSlots];
  PushBook<Slot> book_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, Answer> answers_ ABSL_GUARDED_BY(mu_);
  // What still refers to `this` outside the reader and writer: pushes being summed
  // (on the executor or the reader) and answers a push's thread holds for it.
  int tasks_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::shared_ptr<const v1::PartitionValues>> writes_ ABSL_GUARDED_BY(mu_);
  // Someone writes to the socket now: the writer, or a push's thread (AnswerPending).
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // What the socket did not take of a frame AnswerPending began: the writer's, first.
  std::string tail_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> end_status_ ABSL_GUARDED_BY(mu_);
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writer_done_ ABSL_GUARDED_BY(mu_) = false;
};

thread_local DataPlaneServer::Session::PendingAnswers*
    DataPlaneServer::Session::pending_answers_ = nullptr;

DataPlaneServer::DataPlaneServer(ParameterShard* shard, PartitionExecutor* executor,
                                 DataPlaneOptions options)
    : shard_(shard),
      executor_(executor),
      options_(std::move(options)),
      registry_(options_.registry != nullptr ? options_.registry
                                             : std::make_shared<prometheus::Registry>()) {
  connections_gauge_ = &prometheus::BuildGauge()
                            .Name("tributary_ps_data_plane_connections")
                            .Help("Open data-plane connections, TCP and local (admitted or "
                                  "owing their hello).")
                            .Register(*registry_)
                            .Add({});
  tickets_gauge_ = &prometheus::BuildGauge()
                        .Name("tributary_ps_data_plane_tickets")
                        .Help("OpenDataPlane tickets issued and not yet used or expired.")
                        .Register(*registry_)
                        .Add({});
  auto& taken = prometheus::BuildCounter()
                    .Name("tributary_ps_data_plane_connections_total")
                    .Help("Data-plane connections by result: admitted (a valid ticket), "
                          "refused (no or a bad hello or ticket, over a limit); and by lane: "
                          "tcp (the data port), local (the Unix socket).")
                    .Register(*registry_);
  admitted_[0] = &taken.Add({{"result", "admitted"}, {"lane", "tcp"}});
  admitted_[1] = &taken.Add({{"result", "admitted"}, {"lane", "local"}});
  refused_counter_[0] = &taken.Add({{"result", "refused"}, {"lane", "tcp"}});
  refused_counter_[1] = &taken.Add({{"result", "refused"}, {"lane", "local"}});
  shared_regions_ = &prometheus::BuildCounter()
                         .Name("tributary_ps_data_plane_shared_regions_total")
                         .Help("Shared memory regions local-lane connections handed over and "
                               "the shard mapped (their pushes' and updates' bytes travel "
                               "through them).")
                         .Register(*registry_)
                         .Add({});
}

DataPlaneServer::~DataPlaneServer() { Shutdown(); }

uint64_t DataPlaneServer::max_frame_bytes() const {
  return options_.max_partition_bytes + dp::kMessageOverheadBytes;
}

absl::Status DataPlaneServer::Start() {
  const std::string where = absl::StrCat(options_.bind_host, ":", options_.port);
  // An address or a host name (resolved as the gRPC listener resolves --listen).
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(options_.port);
  if (int error = ::getaddrinfo(options_.bind_host.c_str(), service.c_str(), &hints, &found);
      error != 0) {
    return absl::UnavailableError(
        absl::StrCat("data plane: cannot resolve ", where, ": ", ::gai_strerror(error)));
  }
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* at = found; at != nullptr && fd < 0; at = at->ai_next) {
    fd = ::socket(at->ai_family, at->ai_socktype | SOCK_CLOEXEC, at->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, at->ai_addr, at->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("data plane: cannot listen on ", where, ": ", last_error));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  // Each connection holds a descriptor: leave most of the process's to gRPC and files.
  max_connections_ = options_.max_connections;
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    max_connections_ = static_cast<int>(
        std::min<uint64_t>(max_connections_, std::max<uint64_t>(16, files.rlim_cur / 4)));
  }
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  listener_ = fd;
  if (options_.local_socket) {
    // Without it workers use TCP: worth a warning, not a refusal to serve.
    absl::StatusOr<int> local = dp::ListenLocal(&local_name_);
    if (local.ok()) {
      local_listener_ = *local;
      namespace_id_ = dp::LocalNamespaceId();
    } else {
      LOG(WARNING) << local.status().message() << "; workers on this host use TCP";
    }
  }
  acceptor_ = std::thread([this] {
    NameThisThread("ps-accept");
    AcceptLoop();
  });
  return absl::OkStatus();
}

void DataPlaneServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  if (listener_ >= 0) ::close(listener_);
  listener_ = -1;
  if (local_listener_ >= 0) ::close(local_listener_);
  local_listener_ = -1;
  {
    absl::MutexLock lock(&mu_);
    for (auto& session : sessions_) {
      session->Stop(absl::UnavailableError("the PS shard is shutting down"));
    }
  }
  // Each peer gets its status if it reads it within 2 seconds; the rest are cut.
  const absl::Time give_up = absl::Now() + absl::Seconds(2);
  while (absl::Now() < give_up) {
    bool all_finished = true;
    {
      absl::MutexLock lock(&mu_);
      for (auto& session : sessions_) all_finished = all_finished && session->Finished();
    }
    if (all_finished) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto& session : sessions_) session->Cut();
  }
  Sweep(/*all=*/true);
}

void DataPlaneServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd waiting[2] = {{listener_, POLLIN, 0}, {local_listener_, POLLIN, 0}};
    const int ready = ::poll(waiting, local_listener_ >= 0 ? 2 : 1, 200);
    Sweep(/*all=*/false);
    if (ready <= 0) continue;
    if (waiting[0].revents != 0) Accept(listener_, /*local=*/false);
    if (local_listener_ >= 0 && waiting[1].revents != 0) Accept(local_listener_, /*local=*/true);
  }
}

void DataPlaneServer::Accept(int listener, bool local) {
  const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    // Out of descriptors or memory: the pending connection stays in the backlog, so
    // back off instead of spinning on it.
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      LOG_EVERY_N(WARNING, 100) << "data plane: accept: " << std::strerror(errno);
      absl::SleepFor(absl::Milliseconds(100));
    }
    return;
  }
  if (!local) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  // A peer that stops reading its values for this long is disconnected.
  dp::SetSendTimeout(fd, absl::Seconds(60));
  absl::MutexLock lock(&mu_);
  // At most max_unadmitted connections owe their hello: a newcomer evicts the one that
  // has owed it longest. A peer that holds silent connections (however fast it
  // reopens them) thus never keeps out a worker, which sends its hello at once.
  Session* oldest = nullptr;
  int unadmitted = 0;
  for (const auto& session : sessions_) {
    if (!session->Unadmitted()) continue;
    ++unadmitted;
    if (oldest == nullptr || session->accepted() < oldest->accepted()) oldest = session.get();
  }
  if (unadmitted >= options_.max_unadmitted && oldest != nullptr) {
    LOG_EVERY_N(WARNING, 100) << "data plane: " << unadmitted
                              << " connections owe their hello (the limit); the oldest is "
                                 "closed for a new one";
    oldest->Evict();
  }
  if (sessions_.size() >= static_cast<size_t>(max_connections_)) {
    Refused(local);
    LOG_EVERY_N(WARNING, 100) << "data plane: " << sessions_.size()
                              << " connections open (the limit " << max_connections_
                              << "); one more closed";
    ::close(fd);
    return;
  }
  sessions_.push_back(std::make_unique<Session>(this, fd, local));
  connections_gauge_->Set(static_cast<double>(sessions_.size()));
  sessions_.back()->Start();
}

void DataPlaneServer::Sweep(bool all) {
  std::vector<std::unique_ptr<Session>> done;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (all || (*it)->Finished()) {
        done.push_back(std::move(*it));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& session : done) {
    session->Join();
    shard_->Detach(session.get());  // After this no sink call reaches it.
  }
  if (!done.empty()) {
    absl::MutexLock lock(&mu_);
    connections_gauge_->Set(static_cast<double>(sessions_.size()));
  }
}

absl::StatusOr<v1::OpenDataPlaneResponse> DataPlaneServer::Issue(const std::string& job_id,
                                                                 uint64_t generation,
                                                                 uint32_t node_rank) {
  absl::StatusOr<std::string> random = SecureRandomBytes(dp::kTicketBytes);
  if (!random.ok()) {
    return absl::InternalError(absl::StrCat("data plane ticket: ", random.status().message()));
  }
  std::string ticket = *std::move(random);
  const absl::Time now = absl::Now();
  if (stopping_.load()) {
    // Its listeners are closed (another process may take the local socket's name).
    return absl::UnavailableError("OpenDataPlane: the PS shard is shutting down");
  }
  absl::MutexLock lock(&mu_);
  absl::erase_if(tickets_, [now](const auto& entry) { return entry.second.expires <= now; });
  // A node asking again and again holds at most kTicketsPerNode: its oldest goes.
  constexpr size_t kTicketsPerNode = 16;
  size_t held = 0;
  auto oldest = tickets_.end();
  for (auto it = tickets_.begin(); it != tickets_.end(); ++it) {
    const Binding& b = it->second;
    if (b.job_id != job_id || b.generation != generation || b.node_rank != node_rank) continue;
    ++held;
    if (oldest == tickets_.end() || b.expires < oldest->second.expires) oldest = it;
  }
  if (held >= kTicketsPerNode) tickets_.erase(oldest);
  std::string digest = dp::TicketDigest(ticket);
  if (tickets_.size() >= options_.max_tickets) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "OpenDataPlane: ", tickets_.size(), " tickets outstanding (the limit); try again in ",
        absl::FormatDuration(options_.ticket_lifetime)));
  }
  tickets_[digest] = Binding{ticket, job_id, generation, node_rank, now + options_.ticket_lifetime};
  tickets_gauge_->Set(static_cast<double>(tickets_.size()));
  v1::OpenDataPlaneResponse response;
  response.set_port(static_cast<uint32_t>(port_));
  response.set_ticket(std::move(ticket));
  response.set_max_frame_bytes(max_frame_bytes());
  response.set_expires_in_seconds(
      static_cast<uint32_t>(absl::ToInt64Seconds(options_.ticket_lifetime)));
  if (!local_name_.empty()) response.set_local_socket(local_name_);  // Set once, by Start.
  return response;
}

absl::StatusOr<std::string> DataPlaneServer::ProveLocal(const std::string& digest,
                                                        const std::string& challenge) {
  absl::MutexLock lock(&mu_);
  const Binding* found = OutstandingLocked(digest);
  if (found == nullptr) {
    return absl::UnauthenticatedError(
        "local data plane: no outstanding ticket has that digest (ask OpenDataPlane for a "
        "new one)");
  }
  return dp::LocalProof(found->ticket, challenge, namespace_id_);
}

DataPlaneServer::Binding* DataPlaneServer::OutstandingLocked(const std::string& digest) {
  auto found = tickets_.find(digest);
  if (found == tickets_.end()) return nullptr;
  if (found->second.expires <= absl::Now()) {
    tickets_.erase(found);
    tickets_gauge_->Set(static_cast<double>(tickets_.size()));
    return nullptr;
  }
  return &found->second;
}

absl::StatusOr<DataPlaneServer::Binding> DataPlaneServer::Redeem(const std::string& ticket) {
  const std::string digest = dp::TicketDigest(ticket);
  absl::MutexLock lock(&mu_);
  Binding* found = OutstandingLocked(digest);
  // The digest is the key; the ticket itself is compared too, so that the table fails
  // closed whatever the digest does.
  if (found == nullptr || !dp::SameBytes(found->ticket, ticket)) {
    return absl::UnauthenticatedError(
        "data plane: unknown, used or expired ticket (ask OpenDataPlane for a new one)");
  }
  Binding binding = std::move(*found);
  tickets_.erase(digest);
  tickets_gauge_->Set(static_cast<double>(tickets_.size()));
  return binding;
}

void DataPlaneServer::Refused(bool local) {
  ++refused_;
  refused_counter_[local ? 1 : 0]->Increment();
}

size_t DataPlaneServer::connections() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace tributary::ps
