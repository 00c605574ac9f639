// The guardrails' one collective per step: an all-gather of a few bytes per
// rank over the HAL, in device memory the plugin allocates (so it works for
// host and device-memory vendors alike).
#pragma once

#include <sigma/guardrails.hpp>

#include <memory>
#include <vector>

namespace sigma::guardrails::detail {

class Exchange {
 public:
  Exchange(const Group& group, std::chrono::milliseconds timeout);
  // Every rank's `bytes` bytes, rank-major. Collective. A peer that does not
  // come within the timeout aborts the communicator: Error(timeout).
  std::vector<uint8_t> all_gather(const void* mine, uint64_t bytes);
  int rank() const { return group_.rank; }
  int world() const { return group_.world; }

 private:
  Group group_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<hal::Buffer> buffer_;
};

}  // namespace sigma::guardrails::detail
