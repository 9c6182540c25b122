// The job flags' data section (job_flags.h).
#include "common/job_flags_internal.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "common/job_spec.h"

// --- Data ---
ABSL_FLAG(std::string, dataset, "idx",
          "Dataset format: idx (MNIST/Fashion-MNIST files), csv, npy (NumPy files), tokens "
          "(a token stream: --train_tokens, --seq_len) or synthetic. Default: idx.");
ABSL_FLAG(std::string, data_dir, tributary::kDefaultIdxDirectory,
          "idx: directory of the IDX files. Default: /usr/share/datasets/fashion-mnist.");
ABSL_FLAG(std::string, train_csv, "", "csv: training file.");
ABSL_FLAG(std::string, test_csv, "", "csv: test file (optional).");
ABSL_FLAG(std::string, train_npy, "",
          "npy: training features (.npy, [samples, ...]; float32/float64 as float32, integer "
          "and bool dtypes as int64 ids, never scaled).");
ABSL_FLAG(std::string, train_labels_npy, "",
          "npy: training targets (.npy): integers [samples] are class ids; integers "
          "[samples, ...] and floats [samples, ...] are targets for a model with its own loss.");
ABSL_FLAG(std::string, test_npy, "", "npy: test features (optional).");
ABSL_FLAG(std::string, test_labels_npy, "", "npy: test labels (with --test_npy).");
ABSL_FLAG(std::string, train_tokens, "",
          "tokens: the training token ids (.npy, one flat integer array), memory-mapped.");
ABSL_FLAG(std::string, test_tokens, "", "tokens: the test token ids (optional).");
ABSL_FLAG(uint32_t, seq_len, 0,
          "tokens: ids per sample window (x = window[0, T), y = window[1, T + 1)); required "
          "with --dataset=tokens, in [1, 65536].");
ABSL_FLAG(int, label_column, 0, "csv: 0-based label column. Default: 0.");
ABSL_FLAG(bool, csv_header, false, "csv: skip the first line. Default: false.");
ABSL_FLAG(uint64_t, train_limit, 0, "Use only the first N training samples; 0 = all.");
ABSL_FLAG(uint64_t, test_limit, 0, "Use only the first N test samples; 0 = all.");
ABSL_FLAG(uint64_t, synthetic_train, 0, "synthetic: training samples; 0 = the default (4096).");
ABSL_FLAG(uint64_t, synthetic_test, 0, "synthetic: test samples; 0 = the default (1024).");
ABSL_FLAG(uint32_t, synthetic_features, 0,
          "synthetic: features per sample; 0 = the default (784).");
ABSL_FLAG(uint32_t, synthetic_classes, 0, "synthetic: classes; 0 = the default (10).");
ABSL_FLAG(bool, normalize, false,
          "Standardise features with the training set's mean and std. Default: false.");

namespace tributary::job_flags {

absl::Status ApplyDataFlags(const FlagUse& use, v1::JobSpec& spec) {
  v1::DatasetSpec& dataset = *spec.mutable_dataset();
  if (use("dataset")) {
    absl::StatusOr<v1::DatasetFormat> format = ParseChoice<v1::DatasetFormat>(
        "dataset", absl::GetFlag(FLAGS_dataset),
        {{"idx", v1::IDX},
         {"csv", v1::CSV},
         {"npy", v1::NPY},
         {"tokens", v1::TOKENS},
         {"synthetic", v1::SYNTHETIC}});
    if (!format.ok()) return format.status();
    dataset.set_format(*format);
  }
  if (use("data_dir") && dataset.format() == v1::IDX) {
    dataset.set_directory(absl::GetFlag(FLAGS_data_dir));
  }
  // Each format's own flags, and no other's.
  const std::vector<std::pair<v1::DatasetFormat, std::vector<const char*>>> own_flags = {
      {v1::NPY, {"train_npy", "train_labels_npy", "test_npy", "test_labels_npy"}},
      {v1::TOKENS, {"train_tokens", "test_tokens", "seq_len"}},
      {v1::CSV, {"train_csv", "test_csv"}}};
  for (const auto& [format, flags] : own_flags) {
    if (format == dataset.format()) continue;
    for (const char* flag : flags) {
      if (FlagGiven(flag)) {
        const char* name = format == v1::NPY ? "npy" : format == v1::TOKENS ? "tokens" : "csv";
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag, ": needs --dataset=", name, " (the job's is ",
                         absl::AsciiStrToLower(v1::DatasetFormat_Name(dataset.format())), ")"));
      }
    }
  }
  if (dataset.format() == v1::NPY) {
    if (use("train_npy")) dataset.set_train_path(absl::GetFlag(FLAGS_train_npy));
    if (use("train_labels_npy")) {
      dataset.set_train_labels_path(absl::GetFlag(FLAGS_train_labels_npy));
    }
    if (use("test_npy")) dataset.set_test_path(absl::GetFlag(FLAGS_test_npy));
    if (use("test_labels_npy")) dataset.set_test_labels_path(absl::GetFlag(FLAGS_test_labels_npy));
  } else if (dataset.format() == v1::TOKENS) {
    if (use("train_tokens")) dataset.set_train_path(absl::GetFlag(FLAGS_train_tokens));
    if (use("test_tokens")) dataset.set_test_path(absl::GetFlag(FLAGS_test_tokens));
    if (use("seq_len")) dataset.set_seq_len(absl::GetFlag(FLAGS_seq_len));
  } else {
    if (use("train_csv")) dataset.set_train_path(absl::GetFlag(FLAGS_train_csv));
    if (use("test_csv")) dataset.set_test_path(absl::GetFlag(FLAGS_test_csv));
  }
  if (use("label_column")) {
    if (absl::GetFlag(FLAGS_label_column) < 0) {
      return BadFlag("label_column", std::to_string(absl::GetFlag(FLAGS_label_column)),
                     "a column index >= 0");
    }
    dataset.set_label_column(static_cast<uint32_t>(absl::GetFlag(FLAGS_label_column)));
  }
  if (use("csv_header")) dataset.set_csv_has_header(absl::GetFlag(FLAGS_csv_header));
  if (use("train_limit")) dataset.set_train_limit(absl::GetFlag(FLAGS_train_limit));
  if (use("test_limit")) dataset.set_test_limit(absl::GetFlag(FLAGS_test_limit));
  if (use("synthetic_train") && absl::GetFlag(FLAGS_synthetic_train) > 0) {
    dataset.set_synthetic_train_samples(absl::GetFlag(FLAGS_synthetic_train));
  }
  if (use("synthetic_test") && absl::GetFlag(FLAGS_synthetic_test) > 0) {
    dataset.set_synthetic_test_samples(absl::GetFlag(FLAGS_synthetic_test));
  }
  if (use("synthetic_features") && absl::GetFlag(FLAGS_synthetic_features) > 0) {
    dataset.set_synthetic_features(absl::GetFlag(FLAGS_synthetic_features));
  }
  if (use("synthetic_classes") && absl::GetFlag(FLAGS_synthetic_classes) > 0) {
    dataset.set_synthetic_classes(absl::GetFlag(FLAGS_synthetic_classes));
  }
  if (use("normalize")) dataset.set_normalize(absl::GetFlag(FLAGS_normalize));
  return absl::OkStatus();
}

}  // namespace tributary::job_flags
