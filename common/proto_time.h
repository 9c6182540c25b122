// absl::Time <-> google.protobuf.Timestamp, at microsecond precision.
#ifndef TRIBUTARY_COMMON_PROTO_TIME_H_
#define TRIBUTARY_COMMON_PROTO_TIME_H_

#include <cstdint>

#include "absl/time/time.h"
#include "google/protobuf/timestamp.pb.h"

namespace tributary {

inline google::protobuf::Timestamp ToProto(absl::Time time) {
  google::protobuf::Timestamp stamp;
  const int64_t micros = absl::ToUnixMicros(time);
  stamp.set_seconds(micros / 1000000);
  stamp.set_nanos(static_cast<int32_t>((micros % 1000000) * 1000));
  return stamp;
}

inline absl::Time FromProto(const google::protobuf::Timestamp& stamp) {
  return absl::FromUnixSeconds(stamp.seconds()) + absl::Nanoseconds(stamp.nanos());
}

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_PROTO_TIME_H_
