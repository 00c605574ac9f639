// sigma.Session's native half: runtime::Session, plus the HAL's collectives
// on host memory the Python half vouches for (contiguous, right size).
// Every call that can wait (on the agent, on peers, on a disk) releases the
// GIL, so the script's other threads go on.
#include <sigma/hal.hpp>
#include <sigma/runtime.hpp>

#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "py_session.hpp"

namespace py = pybind11;

namespace sigma::python {

namespace {

constexpr double kMaxTimeoutS = 7 * 24 * 3600.0;  // a week: far below what nanoseconds in int64 hold

// Refuses what the HAL would: an unknown dtype or op, a root outside the
// world, a bound that is not positive. Returns the bytes of the whole buffer.
uint64_t checked_bytes(const runtime::Session& s, hal_coll_op_t op, uint64_t count, int dtype, int reduce,
                       uint32_t root, double timeout_s) {
  const hal_dtype_t dt = checked_dtype(dtype);
  if (reduce < 0 || reduce >= HAL_REDUCE_COUNT_V1)
    throw Error(Code::invalid_argument, "sigma: reduce op " + std::to_string(reduce) + " is not a HAL op");
  if (op == HAL_COLL_BROADCAST && root >= s.world_size())
    throw Error(Code::invalid_argument, "sigma: broadcast root " + std::to_string(root) +
                                            " is not a rank of world " + std::to_string(s.world_size()));
  if (!(timeout_s > 0) || timeout_s > kMaxTimeoutS)
    throw Error(Code::invalid_argument,
                "sigma: timeout_s must be in (0, " + std::to_string(kMaxTimeoutS) + "]");
  return (op == HAL_COLL_ALL_GATHER ? count * s.world_size() : count) * hal::dtype_size(dt);
}

std::chrono::nanoseconds bound(double timeout_s) {
  return std::chrono::nanoseconds(static_cast<int64_t>(timeout_s * 1e9));
}

}  // namespace

void PySession::collective(hal_coll_op_t op, uintptr_t addr, uint64_t count, int dtype, int reduce,
                           uint32_t root, double timeout_s) {
  if (checked_bytes(s_, op, count, dtype, reduce, root, timeout_s) == 0) return;
  const auto dt = static_cast<hal_dtype_t>(dtype);
  auto* host = reinterpret_cast<void*>(addr);
  if (op == HAL_COLL_ALL_REDUCE)
    s_.all_reduce(host, count, dt, static_cast<hal_reduce_op_t>(reduce), bound(timeout_s));
  else if (op == HAL_COLL_BROADCAST)
    s_.broadcast(host, count, dt, root, bound(timeout_s));
  else
    s_.all_gather(host, count, dt, bound(timeout_s));
}

namespace {

// Calls Python from the session's loop (GIL released around it): with the
// GIL, a sigma.Error it raises thrown as libsigma's own.
template <typename F>
auto in_python(F&& f) {
  py::gil_scoped_acquire gil;
  try {
    return f();
  } catch (py::error_already_set& e) {
    rethrow_as_sigma(e);
    throw;
  }
}

// step(step, batch) -> (loss, tokens, flops, peak_flops, note, rollback),
// rollback None or (to_index, skip_begin, skip_end, reason).
runtime::StepOutcome outcome_of(const py::object& r) {
  const auto t = r.cast<py::tuple>();
  runtime::StepOutcome out;
  if (t.size() != 6) throw Error(Code::invalid_argument, "Session.run: a step's outcome is a 6-tuple");
  if (!t[5].is_none()) {
    const auto rb = t[5].cast<py::tuple>();
    out.rollback = runtime::Rollback{rb[0].cast<uint64_t>(), rb[1].cast<uint64_t>(), rb[2].cast<uint64_t>(),
                                     rb[3].cast<std::string>()};
    return out;
  }
  out.report = runtime::StepReport{t[0].cast<std::optional<double>>(), t[1].cast<uint64_t>(),
                                   t[2].cast<double>(), t[3].cast<double>(), t[4].cast<std::string>()};
  return out;
}

}  // namespace

std::optional<uint64_t> PySession::run(uint64_t total_steps, const py::object& step,
                                       const py::object& on_generation) {
  runtime::Loop loop;
  loop.total_steps = total_steps;
  loop.step = [&step](uint64_t k, uint64_t batch) {
    return in_python([&] { return outcome_of(step(k, batch)); });
  };
  if (!on_generation.is_none())
    loop.on_generation = [&on_generation](uint64_t next) { in_python([&] { on_generation(next); }); };
  py::gil_scoped_release nogil;
  return s_.run(loop);
}

void PySession::add_state_item(const std::string& name, uint64_t max_bytes, const py::object& save,
                               const py::object& restore, bool kept_on_rollback) {
  // The callables outlive this call: held (with their references) by the
  // session's item; released with the GIL held when the session goes.
  auto keep = std::make_shared<std::pair<py::object, py::object>>(save, restore);
  items_.push_back(keep);
  runtime::StateItem it;
  it.name = name;
  it.max_bytes = max_bytes;
  it.save = [keep] { return in_python([&] { return keep->first().cast<std::string>(); }); };
  it.restore = [keep](std::string_view b) {
    in_python([&] { keep->second(py::bytes(b.data(), b.size())); });
  };
  it.kept_on_rollback = kept_on_rollback;
  s_.add_state_item(std::move(it));
}

void PySession::device_collective(hal_coll_op_t op, uintptr_t addr, uint64_t count, int dtype, int reduce,
                                  uint32_t root, double timeout_s) {
  if (checked_bytes(s_, op, count, dtype, reduce, root, timeout_s) == 0) return;
  const hal_dtype_t dt = static_cast<hal_dtype_t>(dtype);
  auto* dev = reinterpret_cast<uint8_t*>(addr);
  const uint64_t at = op == HAL_COLL_ALL_GATHER ? count * hal::dtype_size(dt) * s_.rank() : 0;
  s_.comm().run(hal::coll_args(op, dt, count, dev + at, dev, static_cast<hal_reduce_op_t>(reduce), root),
                bound(timeout_s));
}

void bind_session(py::module_& m) {
  for (const auto& [name, v] : {std::pair{"DTYPE_F32", HAL_DTYPE_F32},
                                {"DTYPE_F16", HAL_DTYPE_F16},
                                {"DTYPE_BF16", HAL_DTYPE_BF16},
                                {"DTYPE_F64", HAL_DTYPE_F64},
                                {"DTYPE_I32", HAL_DTYPE_I32},
                                {"DTYPE_I64", HAL_DTYPE_I64},
                                {"DTYPE_U8", HAL_DTYPE_U8}})
    m.attr(name) = static_cast<int>(v);
  for (const auto& [name, v] : {std::pair{"REDUCE_SUM", HAL_REDUCE_SUM},
                                {"REDUCE_PROD", HAL_REDUCE_PROD},
                                {"REDUCE_MIN", HAL_REDUCE_MIN},
                                {"REDUCE_MAX", HAL_REDUCE_MAX},
                                {"REDUCE_AVG", HAL_REDUCE_AVG}})
    m.attr(name) = static_cast<int>(v);

  py::class_<PySession>(m, "Session")
      .def(py::init<>(), release())
      .def_static("under_agent", &runtime::Session::under_agent)
      .def("set_state", &PySession::set_state)
      .def("add_state_item", &PySession::add_state_item, py::arg("name"), py::arg("max_bytes"),
           py::arg("save"), py::arg("restore"), py::arg("kept_on_rollback") = false)
      .def("batch_of", [](PySession& p, uint64_t step) { return p.s().batch_of(step); })
      .def("run", &PySession::run, py::arg("total_steps"), py::arg("step"),
           py::arg("on_generation") = py::none())
      .def(
          "join", [](PySession& p) { return p.s().join(); }, release())
      .def(
          "wait_for_rank", [](PySession& p) { p.s().wait_for_rank(); }, release())
      .def_property_readonly("restore_pending", [](PySession& p) { return p.s().restore_pending(); })
      .def_property_readonly("rank", [](PySession& p) { return p.s().rank(); })
      .def_property_readonly("world_size", [](PySession& p) { return p.s().world_size(); })
      .def_property_readonly("generation", [](PySession& p) { return p.s().generation(); })
      .def_property_readonly("ended", [](PySession& p) { return p.s().ended(); })
      .def("step_begin", [](PySession& p, uint64_t step) { p.s().step_begin(step); })
      .def("step_end", &PySession::step_end, py::arg("step"), py::arg("loss") = py::none(),
           py::arg("tokens") = 0, py::arg("flops") = 0.0, py::arg("peak_flops") = 0.0, py::arg("note") = "",
           release())
      .def("should_checkpoint", [](PySession& p, uint64_t step) { return p.s().should_checkpoint(step); })
      .def("should_migrate", [](PySession& p) { return p.s().should_migrate(); })
      .def(
          "rollback", [](PySession& p, uint64_t index) { return p.s().rollback(index); }, release())
      .def(
          "recover",
          [](PySession& p, const std::string& reason, const std::optional<std::string>& code) {
            if (!code) return p.s().recover(reason);
            if (const auto c = code_named(*code)) return p.s().recover(*c, reason);
            throw sigma::Error(sigma::Code::invalid_argument, "recover: '" + *code + "' names no error code");
          },
          py::arg("reason") = "", py::arg("code") = py::none(), release())
      .def(
          "finish", [](PySession& p, uint64_t done) { p.s().finish(done); }, release())
      .def(
          "all_reduce",
          [](PySession& p, uintptr_t addr, uint64_t count, int dtype, int op, double timeout_s) {
            p.collective(HAL_COLL_ALL_REDUCE, addr, count, dtype, op, 0, timeout_s);
          },
          release())
      .def(
          "broadcast",
          [](PySession& p, uintptr_t addr, uint64_t count, int dtype, uint32_t root, double timeout_s) {
            p.collective(HAL_COLL_BROADCAST, addr, count, dtype, HAL_REDUCE_SUM, root, timeout_s);
          },
          release())
      .def(
          "all_gather",
          [](PySession& p, uintptr_t addr, uint64_t count, int dtype, double timeout_s) {
            p.collective(HAL_COLL_ALL_GATHER, addr, count, dtype, HAL_REDUCE_SUM, 0, timeout_s);
          },
          release())
      .def(
          "device_collective",
          [](PySession& p, const std::string& op, uintptr_t addr, uint64_t count, int dtype, int reduce,
             uint32_t root, double timeout_s) {
            const hal_coll_op_t o = op == "all_reduce"  ? HAL_COLL_ALL_REDUCE
                                    : op == "broadcast" ? HAL_COLL_BROADCAST
                                    : op == "all_gather"
                                        ? HAL_COLL_ALL_GATHER
                                        : throw Error(Code::invalid_argument, "sigma: op " + op);
            p.device_collective(o, addr, count, dtype, reduce, root, timeout_s);
          },
          release())
      .def_property_readonly("vendor", [](PySession& p) { return p.s().plugin()->name(); })
      // (count, size, index, position, epoch, live): runtime::ReplicaLayout.
      .def_property_readonly("replicas",
                             [](PySession& p) {
                               const auto& l = p.s().replicas();
                               return py::make_tuple(l.count, l.size, l.index, l.position, l.epoch, l.live);
                             })
      .def("microbatches", [](PySession& p, uint32_t total) { return p.s().microbatches(total); })
      .def(
          "data_parallel_all_reduce",
          [](PySession& p, uintptr_t addr, uint64_t count, int dtype, int op, double timeout_s) {
            if (checked_bytes(p.s(), HAL_COLL_ALL_REDUCE, count, dtype, op, 0, timeout_s) == 0) return;
            p.s().data_parallel_all_reduce(reinterpret_cast<void*>(addr), count,
                                           static_cast<hal_dtype_t>(dtype), static_cast<hal_reduce_op_t>(op),
                                           bound(timeout_s));
          },
          release());
}

}  // namespace sigma::python
