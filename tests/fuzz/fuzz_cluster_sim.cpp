// libFuzzer target for the cluster simulator's three parsers of outside
// bytes: the scenario YAML, the failure-model JSON and a sigmarun journal
// to replay. The first byte picks the parser (mod 3). Any input must be accepted or refused with
// sigma::Error(invalid_argument) naming the file — never a crash or a hang.
// An accepted small scenario is run too: whatever it says, it must run.
#include <sigma/error.hpp>
#include <sigma/sim.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

// The replay defines the strong one; under libFuzzer nothing listens.
extern "C" __attribute__((weak)) void sigma_fuzz_accepted(const char*) {}

namespace {

void refused(const sigma::Error& e, const char* file) {
  if (e.code() != sigma::Code::invalid_argument || std::string(e.what()).find(file) == std::string::npos)
    __builtin_trap();  // every refusal names the file
}

sigma::sim::FailureModel small_model() {
  sigma::sim::FailureModel m;
  m.categories = {{"faulty_gpu", sigma::sim::Scope::device, 3, true},
                  {"nic", sigma::sim::Scope::node, 1, false},
                  {"software_bug", sigma::sim::Scope::software, 1, false},
                  {"nccl_watchdog_timeout", sigma::sim::Scope::hang, 1, false},
                  {"silent_data_corruption", sigma::sim::Scope::silent, 1, false}};
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1u << 16)) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 3 == 2) {
    sigma::sim::Replay r;
    try {
      r = sigma::sim::parse_journal(text, "fuzz.jsonl");
      sigma_fuzz_accepted("journal");
    } catch (const sigma::Error& e) {
      refused(e, "fuzz.jsonl");
      return 0;
    }
    if (r.scenario.accelerators > 64 || r.scenario.days > 1 ||
        r.scenario.days * 86400 / r.scenario.step_s > 1e5)
      return 0;  // large but valid: running it only costs time
    try {
      const auto res = sigma::sim::run(r.scenario);
      sigma::sim::compare_decisions(r.journalled, res.policies.at(0).decisions);
    } catch (const sigma::Error& e) {
      if (e.code() != sigma::Code::invalid_argument) __builtin_trap();  // e.g. more spares than devices
    }
    return 0;
  }
  if (data[0] % 3 == 1) {
    try {
      sigma::sim::parse_failure_model(text, "fuzz.json");
      sigma_fuzz_accepted("model");
    } catch (const sigma::Error& e) {
      refused(e, "fuzz.json");
    }
    return 0;
  }
  sigma::sim::Scenario s;
  try {
    s = sigma::sim::parse_scenario(text, "fuzz.yaml", small_model());
    sigma_fuzz_accepted("scenario");
  } catch (const sigma::Error& e) {
    refused(e, "fuzz.yaml");
    return 0;
  }
  if (s.accelerators > 64 || s.days > 2 || s.days / s.step_s > 1e5 ||
      s.days * 86400 / s.telemetry_period_s > 1e5)
    return 0;  // large but valid: running it only costs time
  if (s.failures.rate_multiplier > 100) return 0;
  for (const auto& p : s.policies)
    if (p.snapshot_every_s < 1 || p.disk_every_s < 1) return 0;
  try {
    sigma::sim::run(s);
  } catch (const sigma::Error& e) {
    if (e.code() != sigma::Code::invalid_argument) __builtin_trap();  // e.g. too many spares
  }
  return 0;
}
