#include "common/testing/prometheus_text.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tributary::testing {
namespace {

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

bool ValidName(const std::string& name) {
  if (name.empty() || !IsNameStart(name[0])) return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

bool ParseValue(const std::string& text, double* value) {
  if (text == "+Inf" || text == "Inf") {
    *value = INFINITY;
    return true;
  }
  if (text == "-Inf") {
    *value = -INFINITY;
    return true;
  }
  if (text == "NaN") {
    *value = NAN;
    return true;
  }
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

// Parses `{a="x",b="y"}` starting at text[pos] == '{'; returns the index after '}'.
bool ParseLabels(const std::string& text, size_t pos, size_t* end) {
  ++pos;
  while (pos < text.size() && text[pos] != '}') {
    const size_t name_begin = pos;
    while (pos < text.size() && IsNameChar(text[pos])) ++pos;
    if (pos == name_begin || !IsNameStart(text[name_begin])) return false;
    if (pos + 1 >= text.size() || text[pos] != '=' || text[pos + 1] != '"') return false;
    pos += 2;
    while (pos < text.size() && text[pos] != '"') {
      if (text[pos] == '\\') {
        if (pos + 1 >= text.size()) return false;
        const char escaped = text[pos + 1];
        if (escaped != '\\' && escaped != '"' && escaped != 'n') return false;
        ++pos;
      }
      ++pos;
    }
    if (pos >= text.size()) return false;
    ++pos;  // closing quote
    if (pos < text.size() && text[pos] == ',') ++pos;
  }
  if (pos >= text.size()) return false;
  *end = pos + 1;
  return true;
}

std::string FamilyOf(const std::string& name, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    if (absl::EndsWith(name, suffix)) {
      const std::string base = name.substr(0, name.size() - std::string(suffix).size());
      if (types.count(base)) return base;
    }
  }
  return name;
}

}  // namespace

double ParsedMetrics::Sum(const std::string& name, const std::string& label_filter) const {
  double total = 0;
  for (const auto& [key, value] : samples) {
    const size_t brace = key.find('{');
    const std::string sample_name = key.substr(0, brace);
    if (sample_name != name) continue;
    if (!label_filter.empty() && !absl::StrContains(key, label_filter)) continue;
    total += value;
  }
  return total;
}

absl::StatusOr<ParsedMetrics> ParsePrometheusText(const std::string& text) {
  static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                               "untyped"};
  ParsedMetrics parsed;
  int line_number = 0;
  for (absl::string_view line_view : absl::StrSplit(text, '\n')) {
    ++line_number;
    const std::string line(line_view);
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, " '", line, "': ", why));
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::vector<std::string> words = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (words.size() >= 2 && (words[1] == "HELP" || words[1] == "TYPE")) {
        if (words.size() < 3 || !ValidName(words[2])) return bad("bad metric name");
        if (words[1] == "TYPE") {
          if (words.size() != 4 || !kTypes.count(words[3])) return bad("unknown TYPE");
          parsed.types[words[2]] = words[3];
        }
      }
      continue;
    }
    size_t pos = 0;
    while (pos < line.size() && IsNameChar(line[pos])) ++pos;
    const std::string name = line.substr(0, pos);
    if (!ValidName(name)) return bad("bad metric name");
    size_t after_labels = pos;
    if (pos < line.size() && line[pos] == '{') {
      if (!ParseLabels(line, pos, &after_labels)) return bad("malformed labels");
    }
    if (after_labels >= line.size() || line[after_labels] != ' ') return bad("no value");
    std::vector<std::string> rest =
        absl::StrSplit(line.substr(after_labels + 1), ' ', absl::SkipEmpty());
    if (rest.empty() || rest.size() > 2) return bad("expected 'value [timestamp]'");
    double value = 0;
    if (!ParseValue(rest[0], &value)) return bad("unparsable value");
    const std::string family = FamilyOf(name, parsed.types);
    if (!parsed.types.empty() && !parsed.types.count(family)) {
      return bad("sample without a TYPE line for its family");
    }
    parsed.samples[line.substr(0, after_labels)] = value;
  }
  return parsed;
}

}  // namespace tributary::testing
