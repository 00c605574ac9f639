// libFuzzer target for the sim vendor's scenario parser: scenario files are
// untrusted input. Any input must give either a Scenario or an error
// message naming file and line, never a crash, hang or unbounded memory.
#include "scenario.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

// The replay defines the strong one; under libFuzzer nothing listens.
extern "C" __attribute__((weak)) void sigma_fuzz_accepted(const char*) {}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return 0;
  std::string error;
  auto s =
      sim_vendor::parse_scenario(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml", error);
  if (!s && error.rfind("fuzz.yaml:", 0) != 0) __builtin_trap();  // every refusal names the file
  if (s) sigma_fuzz_accepted("scenario");
  return 0;
}
