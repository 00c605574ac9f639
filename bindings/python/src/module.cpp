// _sigma: the native half of the `sigma` Python package (see bindings.hpp).
#include "bindings.hpp"

namespace sigma::python {

hal_dtype_t checked_dtype(int dtype) {
  if (dtype < 0 || dtype >= HAL_DTYPE_COUNT_V1)
    throw Error(Code::invalid_argument, "sigma: dtype code " + std::to_string(dtype) + " is not a HAL dtype");
  return static_cast<hal_dtype_t>(dtype);
}

std::vector<checkpoint::TensorView> to_views(const std::vector<ViewTuple>& tuples) {
  std::vector<checkpoint::TensorView> views;
  views.reserve(tuples.size());
  for (const auto& [name, dtype, shape, addr] : tuples)
    views.emplace_back(name, checked_dtype(dtype), shape, reinterpret_cast<void*>(addr));
  return views;
}

}  // namespace sigma::python

PYBIND11_MODULE(_sigma, m) {
  m.doc() = "libsigma's engines for Python; use the `sigma` package, not this module";
  sigma::python::bind_errors(m);
  sigma::python::bind_session(m);
  sigma::python::bind_guardrails(m);
  sigma::python::bind_checkpoint(m);
  sigma::python::bind_planner(m);
  sigma::python::bind_health(m);
}
