#include "bench/common/bench_json.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace tributary::bench {
namespace {

absl::StatusOr<const google::protobuf::Value*> Lookup(const google::protobuf::Struct& object,
                                                      const std::string& path,
                                                      const std::string& what) {
  const google::protobuf::Struct* current = &object;
  const google::protobuf::Value* value = nullptr;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    const std::string key(part);
    if (current == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": '", path, "': a part before '", key, "' is not an object"));
    }
    auto found = current->fields().find(key);
    if (found == current->fields().end()) {
      return absl::NotFoundError(absl::StrCat(what, ": no '", path, "'"));
    }
    value = &found->second;
    current = value->has_struct_value() ? &value->struct_value() : nullptr;
  }
  return value;
}

}  // namespace

absl::StatusOr<google::protobuf::Struct> ParseJsonObject(const std::string& text,
                                                         const std::string& what) {
  google::protobuf::Struct object;
  const auto parsed = google::protobuf::util::JsonStringToMessage(text, &object);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": not a JSON object (", parsed.message().as_string(), "): ", text.substr(0, 200)));
  }
  return object;
}

absl::StatusOr<std::string> LastJsonLine(const std::string& text, const std::string& what) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  for (auto line = lines.rbegin(); line != lines.rend(); ++line) {
    if (!line->empty() && line->front() == '{') return std::string(*line);
  }
  return absl::NotFoundError(absl::StrCat(what, ": no JSON line in its output"));
}

absl::StatusOr<double> JsonNumber(const google::protobuf::Struct& object, const std::string& path,
                                  const std::string& what) {
  absl::StatusOr<const google::protobuf::Value*> value = Lookup(object, path, what);
  if (!value.ok()) return value.status();
  if (!(*value)->has_number_value()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' is not a number"));
  }
  return (*value)->number_value();
}

absl::Status JsonNumbers(const google::protobuf::Struct& object,
                         std::initializer_list<JsonField> fields, const std::string& what) {
  for (const JsonField& field : fields) {
    absl::StatusOr<double> value = JsonNumber(object, field.path, what);
    if (!value.ok()) return value.status();
    *field.into = *value;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JsonString(const google::protobuf::Struct& object,
                                       const std::string& path, const std::string& what) {
  absl::StatusOr<const google::protobuf::Value*> value = Lookup(object, path, what);
  if (!value.ok()) return value.status();
  if (!(*value)->has_string_value()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' is not a string"));
  }
  return (*value)->string_value();
}

absl::Status WriteJobJson(const v1::JobSpec& spec, const std::string& path) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = true;
  const auto printed = google::protobuf::util::MessageToJsonString(spec, &json, options);
  if (!printed.ok()) {
    return absl::InternalError(absl::StrCat("job spec as JSON: ", printed.message().as_string()));
  }
  std::ofstream out(path, std::ios::trunc);
  out << json << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write the job spec to ", path));
  return absl::OkStatus();
}

std::string JobSpecJson(const v1::JobSpec& spec) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(spec, &json, options).ok()) return "{}";
  return json;
}

std::string JsonQuote(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      quoted += absl::StrFormat("\\u%04x", static_cast<int>(c));
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

}  // namespace tributary::bench
