#include "worker/engine/npy.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tributary::engine {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
// np.save writes headers of a few hundred bytes; anything this large is not one.
constexpr uint32_t kMaxHeaderBytes = 1 << 20;
// Elements of one file: 2^40 floats would be 4 TiB, far beyond any worker.
constexpr int64_t kMaxElements = int64_t{1} << 40;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("dataset file ", path, ": ", what));
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// Where the header dictionary of a file starting with `prefix` begins, and its length:
// the magic, the version (1, 2 or 3) and the little-endian length field.
struct HeaderSpan {
  size_t start = 0;
  size_t length = 0;
};

absl::StatusOr<HeaderSpan> FindHeader(const std::string& path, absl::string_view prefix) {
  if (prefix.size() < 10 ||
      prefix.substr(0, kMagicBytes) != absl::string_view(kMagic, kMagicBytes)) {
    return Bad(path, "not a .npy file (no \\x93NUMPY magic)");
  }
  const int major = static_cast<unsigned char>(prefix[6]);
  if (major < 1 || major > 3) {
    return Bad(path, absl::StrCat(".npy format version ", major, " is not 1, 2 or 3"));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (prefix.size() < 8 + length_bytes) return Bad(path, "truncated .npy header");
  HeaderSpan span;
  for (size_t i = 0; i < length_bytes; ++i) {
    span.length |= static_cast<size_t>(static_cast<unsigned char>(prefix[8 + i])) << (8 * i);
  }
  span.start = 8 + length_bytes;
  if (span.length > kMaxHeaderBytes) {
    return Bad(path, absl::StrCat(".npy header of ", span.length, " bytes is too long"));
  }
  return span;
}

// The value of `key` in the header's Python dict literal, as raw text: a quoted
// string, True/False or a parenthesised tuple.
absl::StatusOr<std::string> DictValue(const std::string& path, absl::string_view dict,
                                      const std::string& key) {
  for (const char quote : {'\'', '"'}) {
    const std::string needle = absl::StrCat(std::string(1, quote), key, std::string(1, quote));
    const size_t at = dict.find(needle);
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = dict.substr(at + needle.size());
    rest = absl::StripLeadingAsciiWhitespace(rest);
    if (!absl::ConsumePrefix(&rest, ":")) break;
    rest = absl::StripLeadingAsciiWhitespace(rest);
    if (rest.empty()) break;
    if (rest[0] == '\'' || rest[0] == '"') {
      const size_t end = rest.find(rest[0], 1);
      if (end == absl::string_view::npos) break;
      return std::string(rest.substr(1, end - 1));
    }
    if (rest[0] == '(') {
      const size_t end = rest.find(')');
      if (end == absl::string_view::npos) break;
      return std::string(rest.substr(0, end + 1));
    }
    const size_t end = rest.find_first_of(",}");
    return std::string(absl::StripTrailingAsciiWhitespace(rest.substr(0, end)));
  }
  return Bad(path, absl::StrCat("header has no readable '", key, "' entry"));
}

// Element type of a descr: kind ('f', 'u', 'i', 'b') and size in bytes.
struct Dtype {
  char kind = 0;
  int size = 0;
};

absl::StatusOr<Dtype> ParseDescr(const std::string& path, const std::string& descr) {
  if (descr.size() < 3) return Bad(path, absl::StrCat("unsupported dtype '", descr, "'"));
  const char order = descr[0];
  Dtype dtype;
  dtype.kind = descr[1];
  int size = 0;
  if (!absl::SimpleAtoi(descr.substr(2), &size) ||
      (size != 1 && size != 2 && size != 4 && size != 8)) {
    return Bad(path, absl::StrCat("unsupported dtype '", descr, "'"));
  }
  dtype.size = size;
  if (order == '>' && size > 1) {
    return Bad(path, absl::StrCat("dtype '", descr,
                                  "' is big-endian; save it little-endian "
                                  "(x.astype(x.dtype.newbyteorder('<')))"));
  }
  if (order != '<' && order != '|' && order != '=') {
    return Bad(path, absl::StrCat("unsupported dtype '", descr, "'"));
  }
  if (dtype.kind != 'f' && dtype.kind != 'u' && dtype.kind != 'i' && dtype.kind != 'b') {
    return Bad(path, absl::StrCat("unsupported dtype '", descr, "'"));
  }
  return dtype;
}

// An open .npy file positioned at its data.
struct NpyFile {
  NpyHeader header;
  Dtype dtype;
  int64_t elements = 1;
  std::ifstream in;
};

absl::Status OpenNpy(const std::string& path, NpyFile& file) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("dataset file ", path, ": cannot read it: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return Bad(path, "not a regular file");
  file.in.open(path, std::ios::binary);
  if (!file.in) {
    return absl::NotFoundError(
        absl::StrCat("dataset file ", path, ": cannot open it: ", std::strerror(errno)));
  }
  std::string prefix(12, '\0');
  file.in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  prefix.resize(static_cast<size_t>(file.in.gcount()));
  absl::StatusOr<HeaderSpan> span = FindHeader(path, prefix);
  if (!span.ok()) return span.status();
  std::string bytes(span->start + span->length, '\0');
  file.in.clear();
  file.in.seekg(0);
  file.in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (static_cast<size_t>(file.in.gcount()) != bytes.size()) {
    return Bad(path, "truncated .npy header");
  }
  absl::StatusOr<NpyHeader> header = ParseNpyHeader(path, bytes);
  if (!header.ok()) return header.status();
  file.header = *std::move(header);
  absl::StatusOr<Dtype> dtype = ParseDescr(path, file.header.descr);
  if (!dtype.ok()) return dtype.status();
  file.dtype = *dtype;
  if (file.header.fortran_order) {
    return Bad(path, "array is in Fortran order; save np.ascontiguousarray(x)");
  }
  for (int64_t dim : file.header.shape) {
    if (dim < 0 || (dim > 0 && file.elements > kMaxElements / dim)) {
      return Bad(path, absl::StrCat("shape ", ShapeText(file.header.shape), " is too large"));
    }
    file.elements *= dim;
  }
  const uint64_t expected = static_cast<uint64_t>(file.elements) * file.dtype.size;
  const uint64_t present = static_cast<uint64_t>(st.st_size) - file.header.data_offset;
  if (static_cast<uint64_t>(st.st_size) < file.header.data_offset || present != expected) {
    return absl::DataLossError(
        absl::StrCat("dataset file ", path, ": shape ", ShapeText(file.header.shape), " of '",
                     file.header.descr, "' needs ", expected, " bytes of data, the file holds ",
                     static_cast<uint64_t>(st.st_size) < file.header.data_offset ? 0 : present));
  }
  file.in.seekg(static_cast<std::streamoff>(file.header.data_offset));
  return absl::OkStatus();
}

// One element at p as a double (floats, and integers for float use).
double DecodeDouble(const char* p, const Dtype& dtype) {
  switch (dtype.kind) {
    case 'f':
      if (dtype.size == 4) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      } else {
        double d;
        std::memcpy(&d, p, 8);
        return d;
      }
    case 'u':
    case 'b': {
      uint64_t u = 0;
      std::memcpy(&u, p, dtype.size);  // Little-endian host.
      return static_cast<double>(u);
    }
    default: {
      int64_t v = 0;
      std::memcpy(&v, p, dtype.size);
      const int shift = 64 - 8 * dtype.size;  // Sign-extend.
      return static_cast<double>(static_cast<int64_t>(static_cast<uint64_t>(v) << shift) >> shift);
    }
  }
}

// One integer element at p, exactly (uint64 values above 2^63 - 1 come out negative:
// the callers refuse uint64 files).
int64_t DecodeInteger(const char* p, const Dtype& dtype) {
  uint64_t u = 0;
  std::memcpy(&u, p, dtype.size);  // Little-endian host.
  if (dtype.kind == 'i' && dtype.size < 8) {
    const int shift = 64 - 8 * dtype.size;
    return static_cast<int64_t>(u << shift) >> shift;
  }
  return static_cast<int64_t>(u);
}

// Calls visit(index, pointer) for each element, reading in chunks, so the file is
// never held twice in memory.
template <typename Visit>
absl::Status ReadElements(const std::string& path, NpyFile& file, Visit visit) {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<char> buffer(static_cast<size_t>(kChunk * file.dtype.size));
  for (int64_t done = 0; done < file.elements;) {
    const int64_t n = std::min(kChunk, file.elements - done);
    file.in.read(buffer.data(), static_cast<std::streamsize>(n * file.dtype.size));
    if (file.in.gcount() != n * file.dtype.size) {
      return absl::DataLossError(
          absl::StrCat("dataset file ", path, ": read failed after ", done, " elements"));
    }
    const char* p = buffer.data();
    for (int64_t i = 0; i < n; ++i, p += file.dtype.size) {
      if (absl::Status stored = visit(done + i, p); !stored.ok()) return stored;
    }
    done += n;
  }
  return absl::OkStatus();
}

bool IsFloat(const Dtype& dtype) { return dtype.kind == 'f'; }
bool IsInteger(const Dtype& dtype) {
  return dtype.kind == 'b' || dtype.kind == 'i' || (dtype.kind == 'u' && dtype.size < 8);
}

// What Tributary takes, for messages.
constexpr char kDtypes[] = "float32, float64, int64, int32, int16, uint16, uint8 or bool";

}  // namespace

absl::StatusOr<NpyHeader> ParseNpyHeader(const std::string& path, const std::string& bytes) {
  absl::StatusOr<HeaderSpan> span = FindHeader(path, bytes);
  if (!span.ok()) return span.status();
  const size_t start = span->start, header_bytes = span->length;
  if (bytes.size() < start + header_bytes) return Bad(path, "truncated .npy header");
  const absl::string_view dict(bytes.data() + start, header_bytes);
  NpyHeader header;
  header.data_offset = start + header_bytes;
  absl::StatusOr<std::string> descr = DictValue(path, dict, "descr");
  if (!descr.ok()) return descr.status();
  header.descr = *descr;
  absl::StatusOr<std::string> fortran = DictValue(path, dict, "fortran_order");
  if (!fortran.ok()) return fortran.status();
  if (*fortran != "True" && *fortran != "False") {
    return Bad(path, absl::StrCat("header's fortran_order is '", *fortran, "'"));
  }
  header.fortran_order = *fortran == "True";
  absl::StatusOr<std::string> shape = DictValue(path, dict, "shape");
  if (!shape.ok()) return shape.status();
  if (shape->size() < 2 || shape->front() != '(' || shape->back() != ')') {
    return Bad(path, absl::StrCat("header's shape is '", *shape, "', not a tuple"));
  }
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(*shape).substr(1, shape->size() - 2), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;       // "(5,)" and "()".
    absl::ConsumeSuffix(&part, "L");  // Python 2 longs.
    int64_t dim = 0;
    if (!absl::SimpleAtoi(part, &dim) || dim < 0) {
      return Bad(path, absl::StrCat("header's shape ", *shape, " holds '", part, "'"));
    }
    header.shape.push_back(dim);
  }
  return header;
}

std::string NpyShapeText(const std::vector<int64_t>& shape) { return ShapeText(shape); }

absl::StatusOr<NpyLayout> ReadNpyLayout(const std::string& path) {
  NpyFile file;
  if (absl::Status opened = OpenNpy(path, file); !opened.ok()) return opened;
  NpyLayout layout;
  layout.header = file.header;
  layout.element_bytes = file.dtype.size;
  return layout;
}

namespace {

// Features and labels files whose dtypes and shapes a dataset can be made of.
absl::Status CheckNpyPair(const std::string& features_path, const NpyFile& x,
                          const std::string& labels_path, const NpyFile& y) {
  if ((!IsFloat(x.dtype) && !IsInteger(x.dtype)) || (IsFloat(x.dtype) && x.dtype.size == 2)) {
    return Bad(features_path,
               absl::StrCat("features of dtype '", x.header.descr, "': use ", kDtypes));
  }
  if ((!IsFloat(y.dtype) && !IsInteger(y.dtype)) || (IsFloat(y.dtype) && y.dtype.size == 2)) {
    return Bad(labels_path, absl::StrCat("labels (targets) of dtype '", y.header.descr,
                                         "': use integer class ids (e.g. int64), integer "
                                         "sequences or float32/float64 values"));
  }
  if (x.header.shape.empty() || x.header.shape[0] == 0) {
    return Bad(features_path, absl::StrCat("features of shape ", ShapeText(x.header.shape),
                                           ": need [samples, ...] with at least one sample"));
  }
  if (y.header.shape.empty()) {
    return Bad(labels_path, absl::StrCat("labels of shape ", ShapeText(y.header.shape),
                                         ": need one target per sample, shape (samples, ...)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Dataset> ReadNpy(const std::string& features_path, const std::string& labels_path) {
  NpyFile x, y;
  if (absl::Status opened = OpenNpy(features_path, x); !opened.ok()) return opened;
  if (absl::Status opened = OpenNpy(labels_path, y); !opened.ok()) return opened;
  if (absl::Status fits = CheckNpyPair(features_path, x, labels_path, y); !fits.ok()) {
    return fits;
  }
  const int64_t count = x.header.shape[0];
  if (y.header.shape[0] != count) {
    return Bad(labels_path, absl::StrCat(y.header.shape[0], " labels for the ", count,
                                         " samples of ", features_path));
  }
  Dataset data;
  data.source = absl::StrCat(features_path, " + ", labels_path);
  data.sample_dims.assign(x.header.shape.begin() + 1, x.header.shape.end());
  if (data.sample_dims.empty()) data.sample_dims.push_back(1);
  int64_t per_sample = 1;
  for (int64_t dim : data.sample_dims) per_sample *= dim;
  if (per_sample == 0) {
    return Bad(features_path, absl::StrCat("features of shape ", ShapeText(x.header.shape),
                                           " have no values per sample"));
  }
  const std::vector<int64_t>& d = data.sample_dims;
  if (d.size() == 3) {
    data.sample_shape = Shape{d[0], d[1], d[2]};
  } else if (d.size() == 2) {
    data.sample_shape = Shape{1, d[0], d[1]};
  } else {
    data.sample_shape = Shape{per_sample, 1, 1};
  }
  // Integer labels of shape (samples,) are class ids; anything else is a target as it is.
  const bool class_ids = IsInteger(y.dtype) && y.header.shape.size() == 1;
  data.target_kind = class_ids        ? TargetKind::kClassId
                     : IsFloat(y.dtype) ? TargetKind::kFloat32
                                        : TargetKind::kInt64;
  data.target_dims.assign(y.header.shape.begin() + 1, y.header.shape.end());
  const int64_t target_size = count == 0 ? 0 : y.elements / count;
  if (!class_ids && target_size == 0) {
    return Bad(labels_path, absl::StrCat("targets of shape ", ShapeText(y.header.shape),
                                         " have no values per sample"));
  }
  data.feature_type = IsFloat(x.dtype) ? FeatureType::kFloat32 : FeatureType::kInt64;
  try {
    if (data.feature_type == FeatureType::kFloat32) {
      data.features.resize(static_cast<size_t>(x.elements));
    } else {
      data.int_features.resize(static_cast<size_t>(x.elements));
    }
    switch (data.target_kind) {
      case TargetKind::kClassId:
        data.labels.resize(static_cast<size_t>(count));
        break;
      case TargetKind::kInt64:
        data.int_targets.resize(static_cast<size_t>(y.elements));
        break;
      case TargetKind::kFloat32:
        data.float_targets.resize(static_cast<size_t>(y.elements));
        break;
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("dataset file ", features_path,
                                                     ": no memory for ", x.elements, " values"));
  }
  auto non_finite = [&](const std::string& path, const char* what, int64_t sample) {
    return Bad(path, absl::StrCat(what, " of sample ", sample,
                                  " holds a non-finite value (or one too large for float32)"));
  };
  absl::Status read = ReadElements(features_path, x, [&](int64_t i, const char* p) {
    if (data.feature_type == FeatureType::kInt64) {
      data.int_features[static_cast<size_t>(i)] = DecodeInteger(p, x.dtype);
      return absl::OkStatus();
    }
    const float f = static_cast<float>(DecodeDouble(p, x.dtype));
    if (!std::isfinite(f)) return non_finite(features_path, "features", i / per_sample);
    data.features[static_cast<size_t>(i)] = f;
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  int64_t largest = -1;
  read = ReadElements(labels_path, y, [&](int64_t i, const char* p) {
    switch (data.target_kind) {
      case TargetKind::kClassId: {
        const int64_t v = DecodeInteger(p, y.dtype);
        if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
          return Bad(labels_path,
                     absl::StrCat("label of sample ", i, " is ", v,
                                  ", outside [0, 2^31): labels of shape (samples,) are class "
                                  "ids (float values are regression targets)"));
        }
        data.labels[static_cast<size_t>(i)] = static_cast<int32_t>(v);
        largest = std::max(largest, v);
        break;
      }
      case TargetKind::kInt64:
        data.int_targets[static_cast<size_t>(i)] = DecodeInteger(p, y.dtype);
        break;
      case TargetKind::kFloat32: {
        const float f = static_cast<float>(DecodeDouble(p, y.dtype));
        if (!std::isfinite(f)) return non_finite(labels_path, "the target", i / target_size);
        data.float_targets[static_cast<size_t>(i)] = f;
        break;
      }
    }
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  data.num_classes = largest + 1;
  return data;
}

}  // namespace tributary::engine
