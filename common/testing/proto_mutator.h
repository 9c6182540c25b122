// A seeded mutation loop for the services' request types (the fuzz tests): from a
// seed message, each round changes a few fields through reflection to values an
// attacker would pick (0, 1, the type's maximum, 2^63, -1, NaN, huge strings, many
// repeated elements) or flips bytes of the serialized form, so that both the parsers
// and the handlers see hostile input. Deterministic for a seed, so a failure repeats.
#ifndef TRIBUTARY_COMMON_TESTING_PROTO_MUTATOR_H_
#define TRIBUTARY_COMMON_TESTING_PROTO_MUTATOR_H_

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/random/random.h"

namespace tributary::testing {

class ProtoMutator {
 public:
  explicit ProtoMutator(uint64_t seed) : random_(seed) {}

  // `seed` changed by 1-4 mutations; a copy of `seed`'s type.
  std::unique_ptr<google::protobuf::Message> Mutate(const google::protobuf::Message& seed);

  // Every seed message of `type` in the text-format files of `directory` (one message
  // per file, *.textproto), sorted by file name; fails the test when there are none.
  static std::vector<std::unique_ptr<google::protobuf::Message>> LoadCorpus(
      const std::string& directory, const google::protobuf::Message& type);

 private:
  void MutateField(google::protobuf::Message& message, int depth);
  // A repeated field: shortened, an element mutated, or elements added (one, or 1000).
  void MutateRepeated(google::protobuf::Message& message,
                      const google::protobuf::FieldDescriptor* field, int depth);
  // A singular field set to an edge value (or a sub-message mutated or cleared).
  void MutateSingular(google::protobuf::Message& message,
                      const google::protobuf::FieldDescriptor* field, int depth);
  void FlipBytes(google::protobuf::Message& message);

  std::mt19937_64 random_;
};

// The directory of a corpus checked in beside a test: $TEST_SRCDIR/tributary/<path>.
std::string CorpusPath(const std::string& path);

// Rounds of a fuzz test: $FUZZ_ITERATIONS, else `default_rounds`.
int FuzzIterations(int default_rounds);

// Writes `message` as text format to DIR/<type>/<name>.textproto (a seed of a corpus).
void WriteSeed(const std::string& dir, const std::string& type, const std::string& name,
               const google::protobuf::Message& message);

}  // namespace tributary::testing

#endif  // TRIBUTARY_COMMON_TESTING_PROTO_MUTATOR_H_
