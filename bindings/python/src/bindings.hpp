// The native half of the `sigma` Python module (_sigma). It is torch-free:
// tensors reach it as (pointer, count, dtype) from the Python half, which
// checks them (device, contiguity, dtype) before a pointer is taken. Each
// bind_* adds one engine's classes to the module.
#pragma once

#include <sigma/checkpoint.hpp>
#include <sigma/error.hpp>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace sigma::python {

using release = pybind11::call_guard<pybind11::gil_scoped_release>;
// (name, HAL dtype, shape, address): one host tensor, as the Python half
// passes it after checking it is contiguous and on the CPU.
using ViewTuple = std::tuple<std::string, int, std::vector<int64_t>, uintptr_t>;

// Throws Error(invalid_argument) for a code that is not a HAL dtype.
hal_dtype_t checked_dtype(int dtype);
std::vector<checkpoint::TensorView> to_views(const std::vector<ViewTuple>& tuples);

// The code named `name` ("device_lost"), or nothing.
std::optional<Code> code_named(const std::string& name);

// sigma::Error -> the class of sigma.errors for its code, same message.
void bind_errors(pybind11::module_& m);
// A sigma.Error raised in Python code libsigma called (a training step):
// thrown as the sigma::Error it stands for, so the library handles it as
// its own. Any other exception, and the caller's mistakes
// (InvalidArgumentError, NotSupportedError), return: rethrow them as they
// are, traceback and all. With the GIL held.
void rethrow_as_sigma(pybind11::error_already_set& e);
void bind_session(pybind11::module_& m);
void bind_guardrails(pybind11::module_& m);
void bind_checkpoint(pybind11::module_& m);
void bind_planner(pybind11::module_& m);
void bind_health(pybind11::module_& m);

}  // namespace sigma::python
