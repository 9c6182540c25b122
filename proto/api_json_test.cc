// The v1 API as grpcurl (and the dashboard's JSON API) speaks it:
// - every message of the API files survives proto3 JSON and back, once per branch of
//   each of its oneofs and with every value of every enum, in both field-name styles;
// - the services and methods are exactly the contract (names, types, streaming);
// - docs/api.md documents every method of every service (a section with an "Errors:"
//   line and a grpcurl line), and every grpcurl JSON body in docs/ parses into the
//   request type of the method it calls.
// The lists of messages, oneofs, enums and methods come from the descriptors, so a
// message or method added to the .proto files is covered (or fails) without editing
// this test.
#include <dirent.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "grpc/health/v1/health.pb.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/job.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "proto/tensor.pb.h"
#include "proto/worker.grpc.pb.h"

namespace tributary {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::Message;
using google::protobuf::MethodDescriptor;
using google::protobuf::OneofDescriptor;
using google::protobuf::Reflection;
using google::protobuf::ServiceDescriptor;

const char* const kApiFiles[] = {"proto/tensor.proto", "proto/job.proto", "proto/coordinator.proto",
                                 "proto/parameter_server.proto", "proto/worker.proto"};

const google::protobuf::DescriptorPool* Pool() {
  return google::protobuf::DescriptorPool::generated_pool();
}

std::vector<const FileDescriptor*> ApiFiles() {
  std::vector<const FileDescriptor*> files;
  for (const char* name : kApiFiles) {
    const FileDescriptor* file = Pool()->FindFileByName(name);
    EXPECT_NE(file, nullptr) << name;
    if (file == nullptr) continue;
    EXPECT_EQ(file->package(), "tributary.v1") << name;
    files.push_back(file);
  }
  return files;
}

void AddWithNested(const Descriptor* message, std::vector<const Descriptor*>* messages) {
  messages->push_back(message);
  for (int i = 0; i < message->nested_type_count(); ++i) {
    AddWithNested(message->nested_type(i), messages);
  }
}

std::vector<const Descriptor*> AllMessages() {
  std::vector<const Descriptor*> messages;
  for (const FileDescriptor* file : ApiFiles()) {
    for (int i = 0; i < file->message_type_count(); ++i) {
      AddWithNested(file->message_type(i), &messages);
    }
  }
  return messages;
}

std::vector<const EnumDescriptor*> AllEnums() {
  std::vector<const EnumDescriptor*> enums;
  for (const FileDescriptor* file : ApiFiles()) {
    for (int i = 0; i < file->enum_type_count(); ++i) enums.push_back(file->enum_type(i));
  }
  for (const Descriptor* message : AllMessages()) {
    for (int i = 0; i < message->enum_type_count(); ++i) enums.push_back(message->enum_type(i));
  }
  return enums;
}

std::vector<const ServiceDescriptor*> AllServices() {
  std::vector<const ServiceDescriptor*> services;
  for (const FileDescriptor* file : ApiFiles()) {
    for (int i = 0; i < file->service_count(); ++i) services.push_back(file->service(i));
  }
  return services;
}

// Fills every field of a message with a non-default value. `variant` picks which
// member of each oneof is set and which value of each enum is used, so that running
// variants 0..N-1 sets every oneof member and every enum value somewhere. What was
// set is recorded in `covered` (full names of oneof fields and enum values).
class Filler {
 public:
  explicit Filler(int variant) : variant_(variant) {}

  void Fill(Message* message, int depth) {
    // The API has no recursive messages; the bound only guards against adding one.
    if (depth > 12) return;
    const Descriptor* descriptor = message->GetDescriptor();
    for (int i = 0; i < descriptor->field_count(); ++i) {
      const FieldDescriptor* field = descriptor->field(i);
      const OneofDescriptor* oneof = field->containing_oneof();
      if (oneof != nullptr) {
        // One member per oneof: a later member would clear the earlier one.
        if (field->index_in_oneof() != variant_ % oneof->field_count()) continue;
        covered_.insert(field->full_name());
      }
      // Two entries of a repeated field; one of a map (the filler gives every entry the
      // same key, and a map keeps one value per key).
      for (int copies = field->is_repeated() && !field->is_map() ? 2 : 1; copies > 0;
           --copies) {
        Set(message, field, depth);
      }
    }
  }

  const std::set<std::string>& covered() const { return covered_; }

 private:
  void Set(Message* message, const FieldDescriptor* field, int depth) {
    const Reflection* reflection = message->GetReflection();
    const bool repeated = field->is_repeated();
    switch (field->cpp_type()) {
#define TRIBUTARY_SET(CPPTYPE, Setter, value)         \
  case FieldDescriptor::CPPTYPE:                      \
    if (repeated) {                                   \
      reflection->Add##Setter(message, field, value); \
    } else {                                          \
      reflection->Set##Setter(message, field, value); \
    }                                                 \
    break;
      TRIBUTARY_SET(CPPTYPE_INT32, Int32, -7)
      TRIBUTARY_SET(CPPTYPE_INT64, Int64, -(int64_t{1} << 40))
      TRIBUTARY_SET(CPPTYPE_UINT32, UInt32, 4000000000u)
      TRIBUTARY_SET(CPPTYPE_UINT64, UInt64, uint64_t{1} << 60)
      TRIBUTARY_SET(CPPTYPE_FLOAT, Float, 1.5f)
      TRIBUTARY_SET(CPPTYPE_DOUBLE, Double, 2.25)
      TRIBUTARY_SET(CPPTYPE_BOOL, Bool, true)
      TRIBUTARY_SET(CPPTYPE_STRING, String,
                    field->type() == FieldDescriptor::TYPE_BYTES
                        ? std::string("\x00\x01\xff", 3)
                        : std::string("tributary \xc3\xa9"))
#undef TRIBUTARY_SET
      case FieldDescriptor::CPPTYPE_ENUM: {
        const EnumDescriptor* values = field->enum_type();
        // Never the zero value: a singular field holding it is not serialized.
        const auto* value = values->value_count() == 1
                                ? values->value(0)
                                : values->value(1 + variant_ % (values->value_count() - 1));
        covered_.insert(value->full_name());
        if (repeated) {
          reflection->AddEnum(message, field, value);
        } else {
          reflection->SetEnum(message, field, value);
        }
        break;
      }
      case FieldDescriptor::CPPTYPE_MESSAGE: {
        Message* child = repeated ? reflection->AddMessage(message, field)
                                  : reflection->MutableMessage(message, field);
        if (field->message_type()->full_name() == "google.protobuf.Timestamp") {
          child->GetReflection()->SetInt64(
              child, child->GetDescriptor()->FindFieldByName("seconds"), 1795000000);
          child->GetReflection()->SetInt32(child, child->GetDescriptor()->FindFieldByName("nanos"),
                                           5000);
        } else {
          Fill(child, depth + 1);
        }
        break;
      }
    }
  }

  const int variant_;
  std::set<std::string> covered_;
};

// Enough variants to reach every oneof member and every non-zero enum value.
int VariantsNeeded() {
  int variants = 1;
  for (const Descriptor* message : AllMessages()) {
    for (int i = 0; i < message->oneof_decl_count(); ++i) {
      variants = std::max(variants, message->oneof_decl(i)->field_count());
    }
  }
  for (const EnumDescriptor* values : AllEnums()) {
    variants = std::max(variants, values->value_count() - 1);
  }
  return variants;
}

void ExpectRoundTrip(const Message& original, bool proto_names) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = proto_names;
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(original, &json, print).ok());
  std::unique_ptr<Message> parsed(original.New());
  const auto status = google::protobuf::util::JsonStringToMessage(json, parsed.get());
  ASSERT_TRUE(status.ok()) << status << "\n" << json;
  std::string differences;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&differences);
  EXPECT_TRUE(differencer.Compare(original, *parsed)) << differences << "\n" << json;
}

TEST(ApiJsonTest, EveryMessageRoundTripsThroughJsonInEveryOneofBranch) {
  const std::vector<const Descriptor*> messages = AllMessages();
  ASSERT_GT(messages.size(), 40u);
  std::set<std::string> covered;
  const int variants = VariantsNeeded();
  for (int variant = 0; variant < variants; ++variant) {
    Filler filler(variant);
    for (const Descriptor* descriptor : messages) {
      SCOPED_TRACE(descriptor->full_name() + " variant " + std::to_string(variant));
      const Message* prototype =
          google::protobuf::MessageFactory::generated_factory()->GetPrototype(descriptor);
      ASSERT_NE(prototype, nullptr);
      std::unique_ptr<Message> original(prototype->New());
      filler.Fill(original.get(), 0);
      if (descriptor->field_count() > 0) {
        ASSERT_GT(original->ByteSizeLong(), 0u);
      }
      ExpectRoundTrip(*original, /*proto_names=*/false);
      ExpectRoundTrip(*original, /*proto_names=*/true);
    }
    covered.insert(filler.covered().begin(), filler.covered().end());
  }
  // Every oneof member and every non-zero enum value went through JSON at least once.
  for (const Descriptor* message : messages) {
    for (int i = 0; i < message->oneof_decl_count(); ++i) {
      const OneofDescriptor* oneof = message->oneof_decl(i);
      for (int j = 0; j < oneof->field_count(); ++j) {
        EXPECT_EQ(covered.count(oneof->field(j)->full_name()), 1u)
            << oneof->field(j)->full_name() << " never set";
      }
    }
  }
  for (const EnumDescriptor* values : AllEnums()) {
    for (int i = 1; i < values->value_count(); ++i) {
      EXPECT_EQ(covered.count(values->value(i)->full_name()), 1u)
          << values->value(i)->full_name() << " never used (no field has this enum type?)";
    }
  }
}

// The body an operator types after `grpcurl -d`: lowerCamelCase or proto names,
// enums by name, 64-bit integers as strings or numbers.
TEST(ApiJsonTest, ParsesAJobAsAnOperatorWritesIt) {
  const std::string body = R"({
    "spec": {
      "name": "fashion-mlp",
      "model": {"name": "mlp", "layerSizes": [784, 256, 128, 10], "dropout": 0.1},
      "dataset": {"format": "IDX", "directory": "/usr/share/datasets/fashion-mnist",
                  "train_limit": "6000"},
      "globalBatchSize": 128,
      "epochs": 3,
      "optimizer": {"type": "MOMENTUM", "learningRate": 0.05, "momentum": 0.9,
                    "schedule": {"kind": "COSINE", "warmupSteps": 100}},
      "mode": "BOUNDED_STALENESS",
      "staleness": 2,
      "nodes_min": 2,
      "wireDtype": "FLOAT16",
      "partitionBytes": 1048576,
      "seed": 42
    }
  })";
  v1::SubmitJobRequest request;
  const auto status = google::protobuf::util::JsonStringToMessage(body, &request);
  ASSERT_TRUE(status.ok()) << status;
  const v1::JobSpec& spec = request.spec();
  EXPECT_EQ(spec.name(), "fashion-mlp");
  EXPECT_EQ(spec.model().layer_sizes_size(), 4);
  EXPECT_EQ(spec.dataset().train_limit(), 6000u);
  EXPECT_EQ(spec.optimizer().type(), v1::MOMENTUM);
  EXPECT_EQ(spec.optimizer().schedule().kind(), v1::COSINE);
  EXPECT_EQ(spec.mode(), v1::BOUNDED_STALENESS);
  EXPECT_EQ(spec.nodes_min(), 2u);
  EXPECT_EQ(spec.wire_dtype(), v1::FLOAT16);
  EXPECT_EQ(spec.partition_bytes(), 1048576);
  EXPECT_EQ(spec.seed(), 42u);
}

TEST(ApiJsonTest, RejectsUnknownFieldsAndEnumNames) {
  v1::SubmitJobRequest request;
  EXPECT_FALSE(
      google::protobuf::util::JsonStringToMessage(R"({"spec": {"globalBatchSise": 64}})", &request)
          .ok());
  EXPECT_FALSE(
      google::protobuf::util::JsonStringToMessage(R"({"spec": {"mode": "SYNCH"}})", &request).ok());
}

// The wire contract: every method of every service, with its types and streaming
// kind. Adding, renaming or retyping a method breaks clients, so it must show here.
TEST(ApiJsonTest, ServicesAndMethodsAreTheContract) {
  const std::map<std::string, std::string> expected = {
      {"Coordinator/RegisterWorker", "RegisterWorkerRequest -> RegisterWorkerResponse"},
      {"Coordinator/Heartbeat", "HeartbeatRequest -> HeartbeatResponse"},
      {"Coordinator/Deregister", "DeregisterRequest -> DeregisterResponse"},
      {"Coordinator/RegisterParameterServer",
       "RegisterParameterServerRequest -> RegisterParameterServerResponse"},
      {"Coordinator/PublishRendezvous", "PublishRendezvousRequest -> PublishRendezvousResponse"},
      {"Coordinator/WaitRendezvous", "WaitRendezvousRequest -> WaitRendezvousResponse"},
      {"Coordinator/SubmitJob", "SubmitJobRequest -> Job"},
      {"Coordinator/GetJob", "GetJobRequest -> Job"},
      {"Coordinator/GetJobHistory", "GetJobHistoryRequest -> JobHistory"},
      {"Coordinator/ListJobs", "ListJobsRequest -> ListJobsResponse"},
      {"Coordinator/PauseJob", "JobControlRequest -> Job"},
      {"Coordinator/ResumeJob", "JobControlRequest -> Job"},
      {"Coordinator/StopJob", "JobControlRequest -> Job"},
      {"Coordinator/ListWorkers", "ListWorkersRequest -> ListWorkersResponse"},
      {"Coordinator/GetClusterStatus", "GetClusterStatusRequest -> ClusterStatus"},
      {"Coordinator/UploadModel", "stream UploadModelRequest -> UploadModelResponse"},
      {"Coordinator/FetchModel", "FetchModelRequest -> stream ModelChunk"},
      {"ParameterServer/InitPartitions", "stream InitPartitionsRequest -> InitPartitionsResponse"},
      {"ParameterServer/PushPull", "stream GradientPush -> stream PartitionValues"},
      {"ParameterServer/Pull", "PullRequest -> stream PartitionValues"},
      {"ParameterServer/GetShardStatus", "GetShardStatusRequest -> ShardStatus"},
      {"ParameterServer/Checkpoint", "CheckpointRequest -> CheckpointResponse"},
      {"ParameterServer/BeginGeneration", "BeginGenerationRequest -> BeginGenerationResponse"},
      {"ParameterServer/EndJob", "EndJobRequest -> EndJobResponse"},
      {"ParameterServer/RestoreJob", "RestoreJobRequest -> RestoreJobResponse"},
      {"ParameterServer/OpenDataPlane", "OpenDataPlaneRequest -> OpenDataPlaneResponse"},
      {"Worker/GetStatus", "GetWorkerStatusRequest -> WorkerStatus"},
      {"Worker/Drain", "DrainRequest -> DrainResponse"},
  };
  std::map<std::string, std::string> actual;
  for (const ServiceDescriptor* service : AllServices()) {
    for (int i = 0; i < service->method_count(); ++i) {
      const MethodDescriptor* method = service->method(i);
      EXPECT_EQ(method->input_type()->file()->package(), "tributary.v1") << method->full_name();
      EXPECT_EQ(method->output_type()->file()->package(), "tributary.v1") << method->full_name();
      actual[service->name() + "/" + method->name()] =
          std::string(method->client_streaming() ? "stream " : "") + method->input_type()->name() +
          " -> " + (method->server_streaming() ? "stream " : "") + method->output_type()->name();
    }
  }
  EXPECT_EQ(actual, expected);
}

// ---------------------------------------------------------------------------------
// The grpcurl lines of the docs.

std::string ReadDoc(const std::string& name) {
  const char* root = std::getenv("TEST_SRCDIR");
  const std::string path = std::string(root == nullptr ? "." : root) + "/tributary/docs/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every docs/*.md in the test's runfiles (the //:docs filegroup).
std::vector<std::string> DocNames() {
  const char* root = std::getenv("TEST_SRCDIR");
  const std::string path = std::string(root == nullptr ? "." : root) + "/tributary/docs";
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  EXPECT_NE(dir, nullptr) << "cannot list " << path;
  if (dir == nullptr) return names;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.size() > 3 && name.substr(name.size() - 3) == ".md") names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

// The commands of a document's ```sh blocks, split into words as the shell would:
// single and double quotes group (without expansion), a backslash-newline continues
// the command, `#` outside quotes starts a comment, a newline outside quotes ends it.
std::vector<std::vector<std::string>> ShellCommands(const std::string& markdown) {
  std::vector<std::vector<std::string>> commands;
  std::istringstream lines(markdown);
  std::string line;
  std::string block;
  bool in_block = false;
  std::vector<std::string> blocks;
  while (std::getline(lines, line)) {
    if (!in_block && line.rfind("```sh", 0) == 0) {
      in_block = true;
      block.clear();
    } else if (in_block && line.rfind("```", 0) == 0) {
      in_block = false;
      blocks.push_back(block);
    } else if (in_block) {
      block += line + "\n";
    }
  }
  for (const std::string& text : blocks) {
    std::vector<std::string> words;
    std::string word;
    bool have_word = false;
    char quote = 0;
    bool comment = false;
    auto end_word = [&] {
      if (have_word) words.push_back(word);
      word.clear();
      have_word = false;
    };
    auto end_command = [&] {
      end_word();
      if (!words.empty()) commands.push_back(words);
      words.clear();
    };
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (comment) {
        if (c == '\n') {
          comment = false;
          end_command();
        }
      } else if (quote != 0) {
        if (c == quote) {
          quote = 0;
        } else {
          word += c;
        }
      } else if (c == '\'' || c == '"') {
        quote = c;
        have_word = true;
      } else if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
        ++i;
        end_word();
      } else if (c == '\n') {
        end_command();
      } else if (c == ' ' || c == '\t') {
        end_word();
      } else if (c == '#' && !have_word) {
        comment = true;
      } else {
        word += c;
        have_word = true;
      }
    }
    EXPECT_EQ(quote, 0) << "unterminated quote in:\n" << text;
    end_command();
  }
  return commands;
}

// A grpcurl command of the docs: its JSON body (-d) and its verb or method.
struct Grpcurl {
  std::vector<std::string> words;
  bool has_body = false;
  std::string body;
  std::string method;    // "tributary.v1.Coordinator/GetJob"
  std::string describe;  // the symbol after `describe`
  bool list = false;
};

std::vector<Grpcurl> GrpcurlCommands(const std::string& markdown) {
  std::vector<Grpcurl> found;
  for (const std::vector<std::string>& words : ShellCommands(markdown)) {
    if (words.empty() || words[0] != "grpcurl") continue;
    Grpcurl command;
    command.words = words;
    for (size_t i = 1; i < words.size(); ++i) {
      const std::string& word = words[i];
      if ((word == "-d" || word == "-H" || word == "-cacert" || word == "-cert" ||
           word == "-key") &&
          i + 1 < words.size()) {
        if (word == "-d") {
          command.has_body = true;
          command.body = words[i + 1];
        }
        ++i;
      } else if (word == "describe" && i + 1 < words.size()) {
        command.describe = words[++i];
      } else if (word == "list") {
        command.list = true;
      } else if (word.find('/') != std::string::npos && word[0] != '-') {
        command.method = word;
      }
    }
    found.push_back(command);
  }
  return found;
}

std::string Joined(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : " ") + word;
  return text;
}

// Every grpcurl line of the docs names a real method (or symbol) and its -d body is
// valid proto3 JSON of that method's request type, as grpcurl would check it.
TEST(ApiJsonTest, EveryGrpcurlLineOfTheDocsMatchesTheApi) {
  // The health service's messages are in the pool through this test's dependency.
  ASSERT_NE(grpc::health::v1::HealthCheckRequest::descriptor(), nullptr);
  int bodies = 0;
  int commands = 0;
  const std::vector<std::string> docs = DocNames();
  EXPECT_GE(docs.size(), 4u);
  for (const std::string& doc : docs) {
    for (const Grpcurl& command : GrpcurlCommands(ReadDoc(doc))) {
      SCOPED_TRACE(doc + ": " + Joined(command.words));
      ++commands;
      if (!command.describe.empty()) {
        const std::string& symbol = command.describe;
        const size_t dot = symbol.rfind('.');
        const bool is_method = dot != std::string::npos &&
                               Pool()->FindServiceByName(symbol.substr(0, dot)) != nullptr &&
                               Pool()->FindMethodByName(symbol) != nullptr;
        EXPECT_TRUE(Pool()->FindServiceByName(symbol) != nullptr || is_method ||
                    Pool()->FindMessageTypeByName(symbol) != nullptr)
            << "describe of an unknown symbol " << symbol;
        continue;
      }
      if (command.list) continue;
      ASSERT_FALSE(command.method.empty()) << "no method";
      const size_t slash = command.method.find('/');
      const ServiceDescriptor* service = Pool()->FindServiceByName(command.method.substr(0, slash));
      ASSERT_NE(service, nullptr) << "unknown service";
      const MethodDescriptor* method = service->FindMethodByName(command.method.substr(slash + 1));
      ASSERT_NE(method, nullptr) << "unknown method";
      EXPECT_FALSE(method->client_streaming()) << "grpcurl cannot send this stream usefully";
      if (!command.has_body) continue;
      const Message* prototype =
          google::protobuf::MessageFactory::generated_factory()->GetPrototype(method->input_type());
      ASSERT_NE(prototype, nullptr);
      std::unique_ptr<Message> request(prototype->New());
      const auto status = google::protobuf::util::JsonStringToMessage(command.body, request.get());
      EXPECT_TRUE(status.ok()) << status << "\n" << command.body;
      ++bodies;
    }
  }
  // The parser found the examples (a broken parser must not pass by finding none).
  EXPECT_GE(commands, 30);
  EXPECT_GE(bodies, 15);
}

// docs/api.md has a section per method of every service ("#### Method"), saying who
// calls it and when ("Called by"), its errors ("Errors:"), and a grpcurl line: a call
// for unary and server-streaming methods, `describe` for client streams.
TEST(ApiJsonTest, ApiDocDocumentsEveryMethod) {
  const std::string doc = ReadDoc("api.md");
  std::map<std::string, std::string> sections;  // "#### Name" -> its text
  {
    std::istringstream lines(doc);
    std::string line;
    std::string current;
    bool in_code = false;
    while (std::getline(lines, line)) {
      if (line.rfind("```", 0) == 0) in_code = !in_code;
      if (in_code || line.rfind("```", 0) == 0) {
        if (!current.empty()) sections[current] += line + "\n";
      } else if (line.rfind("#### ", 0) == 0) {
        current = line.substr(5);
        EXPECT_EQ(sections.count(current), 0u) << "two sections named " << current;
        sections[current];
      } else if (line.rfind("#", 0) == 0) {
        current.clear();
      } else if (!current.empty()) {
        sections[current] += line + "\n";
      }
    }
  }
  for (const ServiceDescriptor* service : AllServices()) {
    for (int i = 0; i < service->method_count(); ++i) {
      const MethodDescriptor* method = service->method(i);
      SCOPED_TRACE(method->full_name());
      auto section = sections.find(method->name());
      ASSERT_NE(section, sections.end()) << "docs/api.md has no \"#### " << method->name() << "\"";
      const std::string& text = section->second;
      EXPECT_NE(text.find("Called by"), std::string::npos) << text;
      EXPECT_NE(text.find("Errors:"), std::string::npos) << text;
      bool shown = false;
      for (const Grpcurl& command : GrpcurlCommands(text)) {
        const std::string path = service->full_name() + "/" + method->name();
        if (method->client_streaming()) {
          shown = shown || command.describe == method->full_name();
        } else {
          shown = shown || command.method == path;
        }
      }
      EXPECT_TRUE(shown) << "no grpcurl line for it in its section:\n" << text;
    }
  }
}

}  // namespace
}  // namespace tributary
