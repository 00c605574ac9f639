// libFuzzer target for sigma-plan's request parser: requests are untrusted
// input. Any input must give either a request or an error naming the file
// and line; an accepted request is planned on a bounded device count (the
// search must price it without a crash, a hang, or a non-finite score).
#include <sigma/error.hpp>
#include <sigma/planner.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

extern "C" __attribute__((weak)) void sigma_fuzz_accepted(const char*) {}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return 0;
  sigma::planner::Request q;
  try {
    q = sigma::planner::parse_request(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
  } catch (const sigma::Error& e) {
    if (std::string(e.what()).rfind("fuzz.yaml:", 0) != 0) __builtin_trap();  // every refusal names the file
    return 0;
  }
  sigma_fuzz_accepted("request");
  q.devices.count = q.devices.count % 4096 + 1;  // the search's cost grows with the divisors of the count
  try {
    for (const auto& c : sigma::planner::search(q.model, q.devices, q.space, q.framework, q.efficiency, 3))
      if (!std::isfinite(c.score.step_s) || c.score.step_s <= 0) __builtin_trap();
  } catch (const sigma::Error&) {
    // A request the parser let through but the model refuses must say why,
    // which Error does; nothing else may escape.
  }
  return 0;
}
