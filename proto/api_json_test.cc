// Every message of the v1 API survives the trip through proto3 JSON, which is how
// grpcurl (and the dashboard's JSON API) speak to the services: each field filled
// with a non-default value, printed as JSON, parsed back, compared field by field.
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "proto/coordinator.grpc.pb.h"
#include "proto/job.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "proto/tensor.pb.h"
#include "proto/worker.grpc.pb.h"

namespace tributary {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

const char* const kApiFiles[] = {"proto/tensor.proto", "proto/job.proto",
                                 "proto/coordinator.proto", "proto/parameter_server.proto",
                                 "proto/worker.proto"};

void Fill(Message* message, int depth);

void SetScalar(Message* message, const FieldDescriptor* field, int depth) {
  const Reflection* reflection = message->GetReflection();
  const bool repeated = field->is_repeated();
  switch (field->cpp_type()) {
#define TRIBUTARY_SET(CPPTYPE, Setter, value)                          \
  case FieldDescriptor::CPPTYPE:                                       \
    if (repeated) {                                                    \
      reflection->Add##Setter(message, field, value);                  \
    } else {                                                           \
      reflection->Set##Setter(message, field, value);                  \
    }                                                                  \
    break;
    TRIBUTARY_SET(CPPTYPE_INT32, Int32, -7)
    TRIBUTARY_SET(CPPTYPE_INT64, Int64, -(int64_t{1} << 40))
    TRIBUTARY_SET(CPPTYPE_UINT32, UInt32, 4000000000u)
    TRIBUTARY_SET(CPPTYPE_UINT64, UInt64, uint64_t{1} << 60)
    TRIBUTARY_SET(CPPTYPE_FLOAT, Float, 1.5f)
    TRIBUTARY_SET(CPPTYPE_DOUBLE, Double, 2.25)
    TRIBUTARY_SET(CPPTYPE_BOOL, Bool, true)
    TRIBUTARY_SET(CPPTYPE_STRING, String,
                  field->type() == FieldDescriptor::TYPE_BYTES ? std::string("\x00\x01\xff", 3)
                                                              : std::string("tributary \xc3\xa9"))
#undef TRIBUTARY_SET
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* values = field->enum_type();
      const auto* last = values->value(values->value_count() - 1);
      if (repeated) {
        reflection->AddEnum(message, field, last);
      } else {
        reflection->SetEnum(message, field, last);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      Message* child = repeated ? reflection->AddMessage(message, field)
                                : reflection->MutableMessage(message, field);
      if (field->message_type()->full_name() == "google.protobuf.Timestamp") {
        child->GetReflection()->SetInt64(child, child->GetDescriptor()->FindFieldByName("seconds"),
                                         1795000000);
        child->GetReflection()->SetInt32(child, child->GetDescriptor()->FindFieldByName("nanos"),
                                         5000);
      } else {
        Fill(child, depth + 1);
      }
      break;
    }
  }
}

void Fill(Message* message, int depth) {
  if (depth > 4) return;
  const Descriptor* descriptor = message->GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    // One member per oneof: a later member would clear the earlier one.
    if (field->containing_oneof() != nullptr && field->index_in_oneof() != 0) continue;
    for (int copies = field->is_repeated() ? 2 : 1; copies > 0; --copies) {
      SetScalar(message, field, depth);
    }
  }
}

std::vector<const Descriptor*> AllMessages() {
  std::vector<const Descriptor*> messages;
  for (const char* name : kApiFiles) {
    const auto* file = google::protobuf::DescriptorPool::generated_pool()->FindFileByName(name);
    EXPECT_NE(file, nullptr) << name;
    if (file == nullptr) continue;
    EXPECT_EQ(file->package(), "tributary.v1") << name;
    for (int i = 0; i < file->message_type_count(); ++i) {
      messages.push_back(file->message_type(i));
    }
  }
  return messages;
}

TEST(ApiJsonTest, EveryMessageRoundTripsThroughJson) {
  const std::vector<const Descriptor*> messages = AllMessages();
  ASSERT_GT(messages.size(), 40u);
  for (const Descriptor* descriptor : messages) {
    SCOPED_TRACE(descriptor->full_name());
    const Message* prototype =
        google::protobuf::MessageFactory::generated_factory()->GetPrototype(descriptor);
    ASSERT_NE(prototype, nullptr);
    std::unique_ptr<Message> original(prototype->New());
    Fill(original.get(), 0);
    if (descriptor->field_count() > 0) {
      ASSERT_GT(original->ByteSizeLong(), 0u);
    }

    std::string json;
    ASSERT_TRUE(google::protobuf::util::MessageToJsonString(*original, &json).ok());
    std::unique_ptr<Message> parsed(prototype->New());
    const auto status = google::protobuf::util::JsonStringToMessage(json, parsed.get());
    ASSERT_TRUE(status.ok()) << status << "\n" << json;
    std::string differences;
    google::protobuf::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&differences);
    EXPECT_TRUE(differencer.Compare(*original, *parsed)) << differences << "\n" << json;
  }
}

TEST(ApiJsonTest, EveryServiceIsInThePackage) {
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const char* service : {"tributary.v1.Coordinator", "tributary.v1.ParameterServer",
                              "tributary.v1.Worker"}) {
    EXPECT_NE(pool->FindServiceByName(service), nullptr) << service;
  }
  const auto* coordinator = pool->FindServiceByName("tributary.v1.Coordinator");
  for (const char* method :
       {"RegisterWorker", "Heartbeat", "Deregister", "RegisterParameterServer",
        "PublishRendezvous", "WaitRendezvous", "SubmitJob", "GetJob", "ListJobs", "PauseJob",
        "ResumeJob", "StopJob", "ListWorkers", "GetClusterStatus"}) {
    EXPECT_NE(coordinator->FindMethodByName(method), nullptr) << method;
  }
  const auto* ps = pool->FindServiceByName("tributary.v1.ParameterServer");
  for (const char* method :
       {"InitPartitions", "PushPull", "Pull", "GetShardStatus", "Checkpoint"}) {
    EXPECT_NE(ps->FindMethodByName(method), nullptr) << method;
  }
  EXPECT_TRUE(ps->FindMethodByName("PushPull")->client_streaming());
  EXPECT_TRUE(ps->FindMethodByName("PushPull")->server_streaming());
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
  EXPECT_FALSE(google::protobuf::util::JsonStringToMessage(
                   R"({"spec": {"globalBatchSise": 64}})", &request)
                   .ok());
  EXPECT_FALSE(google::protobuf::util::JsonStringToMessage(R"({"spec": {"mode": "SYNCH"}})",
                                                           &request)
                   .ok());
}

}  // namespace
}  // namespace tributary
