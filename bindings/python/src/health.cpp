// sigma.HealthMonitor's native half: health::Monitor fed from Python with
// named readings (a telemetry field per keyword), verdicts out as dicts.
#include <sigma/health.hpp>

#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"

namespace py = pybind11;

namespace sigma::python {
namespace {

// Keyword -> HAL field and whether it is a counter (u64).
struct Field {
  hal_field_id_t id;
  bool counter;
};
const std::map<std::string, Field>& fields() {
  static const std::map<std::string, Field> f = {
      {"temperature_c", {HAL_FIELD_TEMPERATURE_C, false}},
      {"power_w", {HAL_FIELD_POWER_W, false}},
      {"utilization_pct", {HAL_FIELD_UTILIZATION_PCT, false}},
      {"ecc_correctable", {HAL_FIELD_ECC_CORRECTABLE, true}},
      {"ecc_uncorrectable", {HAL_FIELD_ECC_UNCORRECTABLE, true}},
      {"link_errors", {HAL_FIELD_LINK_ERRORS, true}},
      {"link_retries", {HAL_FIELD_LINK_RETRIES, true}},
  };
  return f;
}

health::Config config(std::optional<double> warn_c, std::optional<double> critical_c,
                      std::optional<double> heartbeat_timeout_s) {
  health::Config c;
  if (warn_c) c.warn_c = *warn_c;
  if (critical_c) c.critical_c = *critical_c;
  if (heartbeat_timeout_s) c.heartbeat_timeout_s = *heartbeat_timeout_s;
  health::validate(c);
  return c;
}

py::dict to_dict(const health::DeviceHealth& d) {
  py::list warnings;
  for (const auto& w : d.warnings)
    warnings.append(py::dict(py::arg("signal") = w.signal, py::arg("rule") = w.rule,
                             py::arg("severity") = health::state_name(w.severity), py::arg("value") = w.value,
                             py::arg("threshold") = w.threshold, py::arg("message") = w.message));
  return py::dict(py::arg("device") = d.device, py::arg("state") = health::state_name(d.state),
                  py::arg("score") = d.score, py::arg("warnings") = warnings);
}

}  // namespace

void bind_health(py::module_& m) {
  py::class_<health::Monitor>(m, "HealthMonitor")
      .def(py::init([](std::optional<double> warn_c, std::optional<double> critical_c,
                       std::optional<double> heartbeat_timeout_s) {
             return std::make_unique<health::Monitor>(config(warn_c, critical_c, heartbeat_timeout_s));
           }),
           py::arg("warn_c") = py::none(), py::arg("critical_c") = py::none(),
           py::arg("heartbeat_timeout_s") = py::none())
      .def(
          "observe",
          [](health::Monitor& mon, uint32_t device, double t, const std::map<std::string, double>& readings) {
            std::vector<hal_telemetry_sample_t> samples;
            for (const auto& [name, value] : readings) {
              const auto it = fields().find(name);
              if (it == fields().end())
                throw Error(Code::invalid_argument, "HealthMonitor.observe: no reading named '" + name + "'");
              hal_telemetry_sample_t s{};
              s.id = it->second.id;
              s.status = HAL_OK;
              if (it->second.counter) {
                if (!(value >= 0))
                  throw Error(Code::invalid_argument,
                              "HealthMonitor.observe: " + name + " is a count, not " + std::to_string(value));
                s.type = HAL_VALUE_U64;
                s.value.u64 = static_cast<uint64_t>(value);
              } else {
                s.type = HAL_VALUE_F64;
                s.value.f64 = value;
              }
              samples.push_back(s);
            }
            mon.add_device(device);
            mon.observe_telemetry(device, t, samples.data(), samples.size());
          })
      .def("heartbeat",
           [](health::Monitor& mon, uint32_t device, double t) {
             mon.add_device(device);
             mon.observe_heartbeat(device, t);
           })
      .def("step",
           [](health::Monitor& mon, uint32_t device, uint64_t step, double seconds, double t) {
             mon.add_device(device);
             mon.observe_step(device, step, seconds, t);
           })
      .def("evaluate", [](health::Monitor& mon, double t) { return mon.evaluate(t).size(); })
      .def("device", [](const health::Monitor& mon, uint32_t device) { return to_dict(mon.device(device)); });
}

}  // namespace sigma::python
