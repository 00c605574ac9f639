// sigma.Guardrails' native half: guardrails::Guardrails over host buffers.
// Its group is a session's communicator of one generation (with replicas,
// the replica's group of one epoch); the Python half builds a new one
// (carrying the policy state) when either changes.
#include <sigma/guardrails.hpp>

#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "py_session.hpp"

namespace py = pybind11;
namespace gr = sigma::guardrails;

namespace sigma::python {
namespace {

// (address, element count, HAL dtype): one gradient or parameter buffer.
using BufferTuple = std::tuple<uintptr_t, uint64_t, int>;

std::vector<gr::BufferView> to_buffers(const std::vector<BufferTuple>& tuples) {
  std::vector<gr::BufferView> out;
  out.reserve(tuples.size());
  for (const auto& [addr, count, dtype] : tuples)
    out.push_back(
        gr::BufferView{reinterpret_cast<const void*>(addr), count, checked_dtype(dtype), nullptr, 0});
  return out;
}

// `journal` replaces the config's journal path; `fallback` is used only
// when neither names one.
gr::Config make_config(const std::optional<std::string>& yaml, const std::string& name,
                       const std::optional<std::string>& journal,
                       const std::optional<std::string>& fallback) {
  gr::Config c = yaml ? gr::Config::from_yaml(*yaml, name) : gr::Config{};
  if (journal)
    c.journal.path = *journal;
  else if (c.journal.path.empty() && fallback)
    c.journal.path = *fallback;
  return c;
}

std::unique_ptr<gr::Guardrails> make(const std::optional<std::string>& yaml, const std::string& name,
                                     const std::optional<std::string>& journal,
                                     const std::optional<std::string>& fallback_journal,
                                     const std::vector<std::pair<std::string, int>>& layers,
                                     PySession* session, const std::string& layout) {
  if (layout != "replicated" && layout != "sharded")
    throw Error(Code::invalid_argument,
                "sigma.Guardrails: layout must be 'replicated' or 'sharded', not '" + layout + "'");
  std::vector<gr::LayerInfo> infos;
  infos.reserve(layers.size());
  for (const auto& [lname, dtype] : layers) infos.push_back({lname, checked_dtype(dtype)});
  gr::Group group;
  if (session) {
    const runtime::Session& s = session->s();
    group.layout = layout == "replicated" ? gr::GradLayout::replicated : gr::GradLayout::sharded;
    if (s.replicas().count > 1) {
      // Replicas: the replica's own group, which a fault in another never
      // touches. Every replica is given the same exchanged gradients and
      // loss (the Python half exchanges the loss), so all decide alike.
      group.comm = &session->s().replica_comm();
      group.rank = static_cast<int>(s.replicas().position);
      group.world = static_cast<int>(s.replicas().size);
    } else {
      group.comm = &session->s().comm();
      group.rank = static_cast<int>(s.rank());
      group.world = static_cast<int>(s.world_size());
    }
  }
  return std::make_unique<gr::Guardrails>(make_config(yaml, name, journal, fallback_journal),
                                          std::move(infos), group);
}

}  // namespace

void bind_guardrails(py::module_& m) {
  py::class_<gr::Decision>(m, "Decision")
      .def_readonly("step", &gr::Decision::step)
      .def_property_readonly("action",
                             [](const gr::Decision& d) { return std::string(gr::action_name(d.action)); })
      .def_readonly("reason", &gr::Decision::reason)
      .def_readonly("loss", &gr::Decision::loss)
      .def_readonly("global_norm", &gr::Decision::global_norm)
      .def_readonly("clip_factor", &gr::Decision::clip_factor)
      .def_readonly("loss_scale", &gr::Decision::loss_scale)
      .def_readonly("next_loss_scale", &gr::Decision::next_loss_scale)
      .def_readonly("grad_multiplier", &gr::Decision::grad_multiplier)
      .def_readonly("non_finite", &gr::Decision::non_finite)
      .def_readonly("non_finite_ranks", &gr::Decision::non_finite_ranks)
      .def_readonly("mismatch_ranks", &gr::Decision::mismatch_ranks)
      .def_readonly("rollback_to_step", &gr::Decision::rollback_to_step)
      .def_readonly("skip_data_begin", &gr::Decision::skip_data_begin)
      .def_readonly("skip_data_end", &gr::Decision::skip_data_end)
      .def_readonly("escalate", &gr::Decision::escalate)
      .def_readonly("deescalate", &gr::Decision::deescalate)
      .def_readonly("check_fingerprint", &gr::Decision::check_fingerprint)
      .def_readonly("riders", &gr::Decision::riders)
      .def("__repr__", [](const gr::Decision& d) {
        return "<sigma.Decision step " + std::to_string(d.step) + " " + gr::action_name(d.action) + ": " +
               d.reason + ">";
      });

  py::class_<gr::FingerprintResult>(m, "FingerprintResult")
      .def_readonly("step", &gr::FingerprintResult::step)
      .def_readonly("match", &gr::FingerprintResult::match)
      .def_readonly("fingerprints", &gr::FingerprintResult::fingerprints)
      .def_readonly("odd_ranks", &gr::FingerprintResult::odd_ranks)
      .def_readonly("rerun_needed", &gr::FingerprintResult::rerun_needed)
      .def_readonly("reason", &gr::FingerprintResult::reason);

  // The session, when given, must outlive the guardrails (keep_alive).
  py::class_<gr::Guardrails>(m, "Guardrails")
      .def(py::init(&make), py::arg("yaml"), py::arg("name"), py::arg("journal"), py::arg("fallback_journal"),
           py::arg("layers"), py::arg("session"), py::arg("layout"), py::keep_alive<1, 7>())
      .def(
          "step",
          [](gr::Guardrails& g, uint64_t step, double loss,
             const std::vector<std::vector<BufferTuple>>& grads) {
            std::vector<std::vector<gr::BufferView>> views;
            views.reserve(grads.size());
            for (const auto& layer : grads) views.push_back(to_buffers(layer));
            return g.step(step, loss, views);
          },
          release())
      .def("note_snapshot", &gr::Guardrails::note_snapshot)
      .def("fingerprint_due", &gr::Guardrails::fingerprint_due)
      .def(
          "check_fingerprint",
          [](gr::Guardrails& g, uint64_t step, const std::vector<BufferTuple>& params) {
            return g.check_fingerprint(step, to_buffers(params));
          },
          release())
      .def_property_readonly("loss_scale", &gr::Guardrails::loss_scale)
      .def("escalated", &gr::Guardrails::escalated)
      .def("save_state", &gr::Guardrails::save_state)
      .def("restore_state", &gr::Guardrails::restore_state);
}

}  // namespace sigma::python
