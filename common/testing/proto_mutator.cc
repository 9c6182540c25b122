#include "common/testing/proto_mutator.h"

#include <dirent.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tributary::testing {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

template <typename T>
T Pick(std::mt19937_64& random, const std::vector<T>& values) {
  return values[random() % values.size()];
}

}  // namespace

std::unique_ptr<Message> ProtoMutator::Mutate(const Message& seed) {
  std::unique_ptr<Message> message(seed.New());
  message->CopyFrom(seed);
  const int mutations = 1 + static_cast<int>(random_() % 4);
  for (int i = 0; i < mutations; ++i) {
    if (random_() % 8 == 0) {
      FlipBytes(*message);
    } else {
      MutateField(*message, 0);
    }
  }
  return message;
}

void ProtoMutator::FlipBytes(Message& message) {
  std::string bytes = message.SerializeAsString();
  if (bytes.empty()) bytes.push_back('\0');
  const int flips = 1 + static_cast<int>(random_() % 3);
  for (int i = 0; i < flips; ++i) {
    if (bytes.empty()) bytes.push_back('\0');
    const size_t at = random_() % bytes.size();
    switch (random_() % 3) {
      case 0:
        bytes[at] = static_cast<char>(random_());
        break;
      case 1:
        bytes.insert(at, 1 + random_() % 8, static_cast<char>(0xff));
        break;
      default:
        bytes.erase(at, 1 + random_() % 4);
    }
  }
  // Whatever parses is kept; what does not parse leaves the message as it was (the
  // parser has seen the bytes either way).
  std::unique_ptr<Message> parsed(message.New());
  google::protobuf::LogSilencer quiet;  // Invalid UTF-8 is logged, and expected here.
  if (parsed->ParseFromString(bytes)) message.CopyFrom(*parsed);
}

void ProtoMutator::MutateField(Message& message, int depth) {
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  if (descriptor->field_count() == 0) return;
  const FieldDescriptor* field = descriptor->field(random_() % descriptor->field_count());
  if (field->is_repeated()) {
    MutateRepeated(message, field, depth);
  } else {
    MutateSingular(message, field, depth);
  }
}

void ProtoMutator::MutateRepeated(Message& message, const FieldDescriptor* field, int depth) {
  const Reflection* reflection = message.GetReflection();
  {
    const int size = reflection->FieldSize(message, field);
    const uint64_t choice = random_() % 4;
    if (choice == 0 && size > 0) {
      reflection->RemoveLast(&message, field);
      return;
    }
    if (choice == 1 && size > 0 && field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      MutateField(*reflection->MutableRepeatedMessage(&message, field, random_() % size),
                  depth + 1);
      return;
    }
    // Add elements: one, or a burst.
    const int add = random_() % 4 == 0 ? 1000 : 1;
    for (int i = 0; i < add; ++i) {
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
          reflection->AddInt32(&message, field,
                               Pick<int32_t>(random_, {0, -1, 1, INT32_MAX, INT32_MIN}));
          break;
        case FieldDescriptor::CPPTYPE_UINT32:
          reflection->AddUInt32(&message, field, Pick<uint32_t>(random_, {0, 1, 7, UINT32_MAX}));
          break;
        case FieldDescriptor::CPPTYPE_INT64:
          reflection->AddInt64(&message, field, Pick<int64_t>(random_, {0, -1, INT64_MAX}));
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          reflection->AddUInt64(&message, field, Pick<uint64_t>(random_, {0, 1, UINT64_MAX}));
          break;
        case FieldDescriptor::CPPTYPE_FLOAT:
          reflection->AddFloat(&message, field, Pick<float>(random_, {0, -1, NAN, INFINITY}));
          break;
        case FieldDescriptor::CPPTYPE_DOUBLE:
          reflection->AddDouble(&message, field, Pick<double>(random_, {0, -1, NAN, 1e308}));
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          reflection->AddBool(&message, field, random_() % 2 == 0);
          break;
        case FieldDescriptor::CPPTYPE_ENUM:
          reflection->AddEnumValue(&message, field, Pick<int>(random_, {0, 1, 2, 99, -1}));
          break;
        case FieldDescriptor::CPPTYPE_STRING:
          reflection->AddString(&message, field, Pick<std::string>(random_, {"", "..", "x"}));
          break;
        case FieldDescriptor::CPPTYPE_MESSAGE:
          if (depth < 4) MutateField(*reflection->AddMessage(&message, field), depth + 1);
          break;
      }
    }
  }
}

void ProtoMutator::MutateSingular(Message& message, const FieldDescriptor* field, int depth) {
  const Reflection* reflection = message.GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      reflection->SetInt32(&message, field,
                           Pick<int32_t>(random_, {0, -1, 1, 2, INT32_MAX, INT32_MIN, 65537}));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      reflection->SetUInt32(&message, field,
                            Pick<uint32_t>(random_, {0, 1, 2, 65536, 65537, 1u << 26, UINT32_MAX}));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      reflection->SetInt64(&message, field,
                           Pick<int64_t>(random_, {0, -1, 1, INT64_MAX, INT64_MIN, 1LL << 40}));
      break;
    case FieldDescriptor::CPPTYPE_UINT64: {
      const uint64_t current = reflection->GetUInt64(message, field);
      reflection->SetUInt64(
          &message, field,
          Pick<uint64_t>(random_, {0, 1, current + 1, current - 1, uint64_t{1} << 40,
                                   (uint64_t{1} << 40) + 1, uint64_t{1} << 63, UINT64_MAX}));
      break;
    }
    case FieldDescriptor::CPPTYPE_FLOAT:
      reflection->SetFloat(&message, field,
                           Pick<float>(random_, {0, -1, NAN, INFINITY, -INFINITY, 1e38f, 1e-45f}));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      reflection->SetDouble(&message, field, Pick<double>(random_, {0, -1, NAN, INFINITY, 1e308}));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      reflection->SetBool(&message, field, !reflection->GetBool(message, field));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      reflection->SetEnumValue(&message, field, Pick<int>(random_, {0, 1, 2, 3, 99, -1}));
      break;
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string value = reflection->GetString(message, field);
      switch (random_() % 6) {
        case 0:
          value.clear();
          break;
        case 1:
          value = "../../etc/passwd";
          break;
        case 2:
          value.assign(1 + random_() % (1 << 16), static_cast<char>(random_()));
          break;
        case 3:
          if (!value.empty()) value.resize(random_() % value.size());
          break;
        case 4:
          value += std::string(1 + random_() % 64, '\xff');
          break;
        default:
          if (!value.empty())
            value[random_() % value.size()] ^= static_cast<char>(1 + random_() % 255);
      }
      reflection->SetString(&message, field, value);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (depth < 4) {
        if (random_() % 8 == 0) {
          reflection->ClearField(&message, field);
        } else {
          MutateField(*reflection->MutableMessage(&message, field), depth + 1);
        }
      }
      break;
  }
}

std::vector<std::unique_ptr<Message>> ProtoMutator::LoadCorpus(const std::string& directory,
                                                               const Message& type) {
  std::vector<std::string> files;
  if (DIR* dir = opendir(directory.c_str()); dir != nullptr) {
    while (dirent* entry = readdir(dir)) {
      if (absl::EndsWith(entry->d_name, ".textproto")) files.push_back(entry->d_name);
    }
    closedir(dir);
  }
  std::sort(files.begin(), files.end());
  std::vector<std::unique_ptr<Message>> corpus;
  for (const std::string& file : files) {
    std::ifstream in(directory + "/" + file);
    std::stringstream text;
    text << in.rdbuf();
    std::unique_ptr<Message> message(type.New());
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text.str(), message.get()))
        << directory << "/" << file << " is not a " << type.GetTypeName();
    corpus.push_back(std::move(message));
  }
  EXPECT_FALSE(corpus.empty()) << "no *.textproto seeds in " << directory;
  return corpus;
}

int FuzzIterations(int default_rounds) {
  int iterations = default_rounds;
  if (const char* text = std::getenv("FUZZ_ITERATIONS")) {
    EXPECT_TRUE(absl::SimpleAtoi(text, &iterations)) << "FUZZ_ITERATIONS=" << text;
  }
  return iterations;
}

void WriteSeed(const std::string& dir, const std::string& type, const std::string& name,
               const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(message, &text);
  std::filesystem::create_directories(dir + "/" + type);
  std::ofstream(dir + "/" + type + "/" + name + ".textproto") << text;
}

std::string CorpusPath(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/tributary/", path);
}

}  // namespace tributary::testing
