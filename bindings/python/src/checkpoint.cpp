// sigma.Checkpointer's native half: checkpoint::Engine over host tensors.
// The Python half turns state dicts into views and back; here a save copies
// them once (into the engine's staging memory) and a background writer
// persists them while the script goes on.
#include <sigma/checkpoint.hpp>

#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"

namespace py = pybind11;
namespace ck = sigma::checkpoint;

namespace sigma::python {
namespace {

std::unique_ptr<ck::Engine> make_engine(const std::string& dir, const std::string& job, uint32_t rank,
                                        uint32_t world, uint32_t keep, uint32_t base_every, int zstd_level,
                                        bool direct_io, const std::string& compression) {
  ck::Options o;
  o.dir = dir;
  o.job = job;
  o.rank = rank;
  o.world = world;
  o.keep = keep;
  o.base_every = base_every;
  o.zstd_level = zstd_level;
  o.direct_io = direct_io;
  if (compression == "always")
    o.compression = ck::Compression::always;
  else if (compression == "never")
    o.compression = ck::Compression::never;
  else if (compression != "automatic")
    throw Error(Code::invalid_argument,
                "compression '" + compression + "' is not 'automatic', 'always' or 'never'");
  return std::make_unique<ck::Engine>(std::move(o));
}

ck::Metadata make_meta(uint64_t step, uint64_t data_position, std::map<std::string, std::string> extra) {
  ck::Metadata meta;
  meta.step = step;
  meta.data_position = data_position;
  meta.extra = std::move(extra);
  return meta;
}

// What a restore hands back to Python: the result and the metadata.
using Restored = std::tuple<ck::RestoreResult, uint64_t, std::map<std::string, std::string>>;

}  // namespace

void bind_checkpoint(py::module_& m) {
  py::class_<ck::SaveResult>(m, "SaveResult")
      .def_readonly("step", &ck::SaveResult::step)
      .def_readonly("path", &ck::SaveResult::path)
      .def_readonly("base", &ck::SaveResult::base)
      .def_readonly("raw_bytes", &ck::SaveResult::raw_bytes)
      .def_readonly("stored_bytes", &ck::SaveResult::stored_bytes)
      .def_readonly("chunks", &ck::SaveResult::chunks)
      .def_readonly("chunks_unchanged", &ck::SaveResult::chunks_unchanged)
      .def_readonly("blocked_s", &ck::SaveResult::blocked_s)
      .def_readonly("backpressure_s", &ck::SaveResult::backpressure_s)
      .def_readonly("persist_s", &ck::SaveResult::persist_s)
      .def("__repr__", [](const ck::SaveResult& r) {
        return "<sigma.SaveResult step " + std::to_string(r.step) + " " + r.path + ">";
      });

  py::class_<ck::RestoreResult>(m, "RestoreResult")
      .def_readonly("step", &ck::RestoreResult::step)
      .def_readonly("path", &ck::RestoreResult::path)
      .def_readonly("saved_world", &ck::RestoreResult::saved_world)
      .def_readonly("resharded", &ck::RestoreResult::resharded)
      .def_readonly("refused", &ck::RestoreResult::refused);

  py::class_<ck::Engine>(m, "CheckpointEngine")
      .def(py::init(&make_engine), py::arg("dir"), py::arg("job"), py::arg("rank"), py::arg("world"),
           py::arg("keep"), py::arg("base_every"), py::arg("zstd_level"), py::arg("direct_io"),
           py::arg("compression") = "automatic")
      .def("save",
           [](ck::Engine& e, const std::vector<ViewTuple>& views, uint64_t step, uint64_t data_position,
              std::map<std::string, std::string> extra, bool async) {
             const auto meta = make_meta(step, data_position, std::move(extra));
             const auto v = to_views(views);
             py::gil_scoped_release unlocked;
             return async ? e.save_async(v, meta) : e.save(v, meta);
           })
      .def("wait", &ck::Engine::wait, release())
      .def("poll", &ck::Engine::poll, release())
      .def("discard_after", &ck::Engine::discard_after, release())
      .def("steps",
           [](const ck::Engine& e) {
             std::vector<uint64_t> steps;
             for (const auto& s : e.list()) steps.push_back(s.step);
             return steps;
           })
      .def(
          "restore",
          [](ck::Engine& e, const std::vector<ViewTuple>& views, uint64_t newest) {
            const auto v = to_views(views);
            ck::Metadata meta;
            ck::RestoreResult r;
            {
              py::gil_scoped_release unlocked;
              r = e.restore(v, &meta, newest);
            }
            return Restored{r, meta.step, meta.extra};
          },
          py::arg("views"), py::arg("newest_step") = UINT64_MAX);
}

}  // namespace sigma::python
