// sigma::Error becomes the Python class of sigma.errors named for its code.
// The classes are plain Python (a hierarchy that also derives from
// ValueError, TimeoutError, MemoryError); the translator only looks them up.
#include <sigma/error.hpp>

#include <array>
#include <optional>
#include <string>

#include "bindings.hpp"

namespace py = pybind11;

namespace sigma::python {
namespace {

constexpr std::array<const char*, 11> kClassOfCode = {
    "Error",                 // ok (never thrown)
    "InvalidArgumentError",  // invalid_argument
    "NotSupportedError",     // not_supported
    "UnavailableError",      // unavailable
    "DeviceLostError",       // device_lost
    "TimeoutError",          // timeout
    "AbortedError",          // aborted
    "RemoteError",           // remote_error
    "OutOfMemoryError",      // out_of_memory
    "Error",                 // internal
    "DataLossError",         // data_loss
};

// sigma.errors, imported once and kept for the interpreter's life (the
// translator may run at any time until then; a static py::object would be
// destroyed after the interpreter).
py::object* g_errors = nullptr;

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const sigma::Error& e) {
    const auto code = static_cast<size_t>(e.code());
    const char* name = code < kClassOfCode.size() ? kClassOfCode[code] : "Error";
    const py::object cls = g_errors->attr(name);
    PyErr_SetString(cls.ptr(), e.what());
  }
}

}  // namespace

std::optional<Code> code_named(const std::string& name) {
  for (int c = static_cast<int>(Code::ok); c <= static_cast<int>(Code::data_loss); ++c)
    if (name == code_name(static_cast<Code>(c))) return static_cast<Code>(c);
  return std::nullopt;
}

void rethrow_as_sigma(py::error_already_set& e) {
  if (g_errors == nullptr || !e.matches(g_errors->attr("Error"))) return;
  const auto code = code_named(py::str(e.value().attr("code")));
  if (!code || *code == Code::invalid_argument || *code == Code::not_supported) return;
  throw Error(*code, py::str(e.value()));
}

void bind_errors(py::module_& m) {
  if (g_errors == nullptr) g_errors = new py::object(py::module_::import("sigma.errors"));
  m.attr("errors") = *g_errors;
  py::register_exception_translator(&translate);
}

}  // namespace sigma::python
