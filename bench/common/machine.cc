#include "bench/common/machine.h"

#include <stdlib.h>

#include <fstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "bench/common/bench_json.h"

namespace tributary::bench {

MachineInfo DescribeMachine() {
  MachineInfo machine;
  machine.cpu_cores = std::thread::hardware_concurrency();
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        machine.cpu_model = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
      break;
    }
  }
  std::ifstream meminfo("/proc/meminfo");
  while (std::getline(meminfo, line)) {
    if (absl::StartsWith(line, "MemTotal:")) {
      std::string digits;
      for (char c : line) {
        if (absl::ascii_isdigit(static_cast<unsigned char>(c))) digits += c;
      }
      double kib = 0;
      if (absl::SimpleAtod(digits, &kib)) machine.memory_gib = kib / (1024.0 * 1024.0);
      break;
    }
  }
  if (getloadavg(machine.load_average, 3) != 3) {
    machine.load_average[0] = machine.load_average[1] = machine.load_average[2] = -1;
  }
  return machine;
}

std::string MachineLine(const MachineInfo& machine) {
  return absl::StrFormat(
      "%u CPU cores (%s), %.1f GiB, load average %.2f %.2f %.2f", machine.cpu_cores,
      machine.cpu_model.empty() ? "model unknown" : machine.cpu_model, machine.memory_gib,
      machine.load_average[0], machine.load_average[1], machine.load_average[2]);
}

std::string MachineJsonMembers(const MachineInfo& machine) {
  return absl::StrFormat(
      "\"cpu_cores\": %u, \"cpu_model\": %s, \"memory_gib\": %.1f, "
      "\"load_average\": [%.2f, %.2f, %.2f]",
      machine.cpu_cores, JsonQuote(machine.cpu_model), machine.memory_gib, machine.load_average[0],
      machine.load_average[1], machine.load_average[2]);
}

std::string MachineJsonMembers(const MachineInfo& machine, const MachineInfo& after) {
  return absl::StrFormat("%s, \"load_average_after\": [%.2f, %.2f, %.2f]",
                         MachineJsonMembers(machine), after.load_average[0], after.load_average[1],
                         after.load_average[2]);
}

std::string LoadAverageAfterLine(const MachineInfo& after) {
  return absl::StrFormat("load average after the runs: %.2f %.2f %.2f", after.load_average[0],
                         after.load_average[1], after.load_average[2]);
}

}  // namespace tributary::bench
