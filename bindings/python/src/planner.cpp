// sigma.plan's native half: a sigma-plan request (YAML text) in, the
// library's JSON of the best layouts out.
#include <sigma/planner.hpp>

#include <chrono>
#include <string>

#include "bindings.hpp"

namespace py = pybind11;

namespace sigma::python {

void bind_planner(py::module_& m) {
  m.def(
      "plan",
      [](const std::string& yaml, const std::string& name, uint32_t top) {
        planner::Request q = planner::parse_request(yaml, name);
        if (top) q.top = top;
        const auto t0 = std::chrono::steady_clock::now();
        const auto best = planner::search(q.model, q.devices, q.space, q.framework, q.efficiency, q.top);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return planner::plans_json(q, best, s);
      },
      py::arg("yaml"), py::arg("name"), py::arg("top"), release());
}

}  // namespace sigma::python
