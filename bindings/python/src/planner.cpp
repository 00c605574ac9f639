// sigma.plan's native half: a sigma-plan request (YAML text) in, the
// library's JSON of the best layouts out.
#include <sigma/planner.hpp>

#include <string>

#include "bindings.hpp"

namespace py = pybind11;

namespace sigma::python {

void bind_planner(py::module_& m) {
  m.def(
      "plan",
      [](const std::string& yaml, const std::string& name, uint32_t top) {
        return planner::plan_json(yaml, name, top);
      },
      py::arg("yaml"), py::arg("name"), py::arg("top"), release());
}

}  // namespace sigma::python
