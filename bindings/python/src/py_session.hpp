// The native session object shared by the bindings that borrow its
// communicator (guardrails).
#pragma once

#include <sigma/hal.hpp>
#include <sigma/runtime.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "bindings.hpp"

namespace sigma::python {

// The session and one reused HAL buffer that collectives stage through (the
// device's memory, whatever the vendor: the trainer's way).
class PySession {
 public:
  PySession() : s_(runtime::SessionOptions::from_env()) {}

  runtime::Session& s() { return s_; }

  void set_state(const std::vector<ViewTuple>& views) { s_.set_state(to_views(views)); }

  void step_end(uint64_t step, std::optional<double> loss, uint64_t tokens, double flops, double peak,
                const std::string& note) {
    s_.step_end(step, runtime::StepReport{loss, tokens, flops, peak, note});
  }

  // One collective over the session's communicator, in place on host
  // memory at `addr` (all-gather: `count` elements per rank, this rank's at
  // rank * count).
  void collective(hal_coll_op_t op, uintptr_t addr, uint64_t count, int dtype, int reduce, uint32_t root,
                  double timeout_s);
  // The same on memory of the session's device itself (a CUDA tensor under
  // the cuda vendor): no staging, the pointer goes to the plugin as is.
  void device_collective(hal_coll_op_t op, uintptr_t addr, uint64_t count, int dtype, int reduce,
                         uint32_t root, double timeout_s);

 private:
  runtime::Session s_;
  std::unique_ptr<hal::Buffer> buf_;
  uint64_t buf_generation_ = 0;
};

}  // namespace sigma::python
