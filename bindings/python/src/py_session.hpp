// The native session object shared by the bindings that borrow its
// communicator (guardrails).
#pragma once

#include <sigma/hal.hpp>
#include <sigma/runtime.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"

namespace sigma::python {

// The session, with the Python callables of its loop and state items.
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

  // The session's loop with Python's step and hook (see runtime::Loop);
  // the GIL is released but for the calls into Python.
  std::optional<uint64_t> run(uint64_t total_steps, const pybind11::object& step,
                              const pybind11::object& on_generation);
  // A state item whose save() returns bytes and restore(bytes) takes them.
  void add_state_item(const std::string& name, uint64_t max_bytes, const pybind11::object& save,
                      const pybind11::object& restore, bool kept_on_rollback);

 private:
  runtime::Session s_;
  std::vector<std::shared_ptr<std::pair<pybind11::object, pybind11::object>>> items_;
};

}  // namespace sigma::python
