// libFuzzer target for the agent protocol: every line a worker, another
// host's agent or the root sends is untrusted bytes (any local process can
// reach the agent's socket). Any input must give a message or an Error
// naming what is wrong, never a crash, a hang or another exception; and a
// message that decodes must encode to one that decodes to the same bytes
// again (no field read that is not written, nor the reverse).
#include "runtime/protocol.hpp"

#include <sigma/error.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" __attribute__((weak)) void sigma_fuzz_accepted(const char*) {}

namespace {

namespace p = sigma::runtime::protocol;

// Decodes with `decode`; when it takes the line, its encoding must be a
// fixed point of decode + encode.
template <class Decode>
void side(const nlohmann::json& j, Decode decode, const char* name) {
  try {
    const auto m = decode(j);
    const nlohmann::json once = p::encode(m);
    if (p::encode(decode(once)) != once) __builtin_trap();
    sigma_fuzz_accepted(name);
  } catch (const sigma::Error&) {
    // refused, naming the kind and the field
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return 0;
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // not JSON: the channel refuses the line before any decoder
  side(
      j, [](const nlohmann::json& x) { return p::decode_worker(x); }, "worker");
  side(
      j, [](const nlohmann::json& x) { return p::decode_agent(x); }, "agent");
  side(
      j, [](const nlohmann::json& x) { return p::decode_node(x); }, "node");
  side(
      j, [](const nlohmann::json& x) { return p::decode_root(x); }, "root");
  try {
    (void)p::decode_greeting(j);
  } catch (const sigma::Error&) {
  }
  return 0;
}
