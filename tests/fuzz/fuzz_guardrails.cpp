// libFuzzer target for the guardrails' two parsers of outside bytes: the
// YAML config (user-written) and the policy state restored from a
// checkpoint (a file on disk). The first byte picks the parser. Any input
// must be accepted or refused with sigma::Error(invalid_argument) — never a
// crash, a hang, or an engine left half-restored.
#include <sigma/guardrails.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

// The replay defines the strong one; under libFuzzer nothing listens.
extern "C" __attribute__((weak)) void sigma_fuzz_accepted(const char*) {}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1u << 16)) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace sigma::guardrails;
  if (data[0] % 2 == 0) {
    try {
      Config::from_yaml(text, "fuzz.yaml");
      sigma_fuzz_accepted("config");
    } catch (const sigma::Error& e) {
      if (e.code() != sigma::Code::invalid_argument || std::string(e.what()).rfind("fuzz.yaml:", 0) != 0)
        __builtin_trap();  // every refusal names the file
    }
    return 0;
  }
  Config c;
  c.spike.enabled = c.precision.enabled = true;
  Guardrails g(c, {{"a", HAL_DTYPE_BF16}, {"b", HAL_DTYPE_F16}});
  const std::string before = g.save_state();
  try {
    g.restore_state(text);
  } catch (const sigma::Error& e) {
    if (e.code() != sigma::Code::invalid_argument) __builtin_trap();
    if (g.save_state() != before) __builtin_trap();  // a refusal changes nothing
    return 0;
  }
  sigma_fuzz_accepted("state");
  // An accepted state must drive a step without failing.
  float grad[4] = {0.1f, -0.2f, 0.3f, 0.0f};
  try {
    g.step(UINT64_MAX - 1, 1.0, {{{grad, 4, HAL_DTYPE_F32}}, {{grad, 2, HAL_DTYPE_F32}}});
  } catch (const sigma::Error& e) {
    if (e.code() != sigma::Code::invalid_argument) __builtin_trap();  // e.g. the step order
  }
  return 0;
}
