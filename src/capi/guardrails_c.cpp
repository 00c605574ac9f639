// The guardrails' C API over sigma::guardrails.
#include <sigma/sigma.h>
#include <sigma/guardrails.hpp>

#include "capi.hpp"

#include <vector>

using namespace sigma;

struct sigma_guardrails_s {
  std::unique_ptr<hal::Communicator> comm;  // borrowed handle
  std::unique_ptr<guardrails::Guardrails> g;
  // What the last decision's pointers point at.
  guardrails::Decision last;
  std::vector<const char*> escalate, deescalate;
};

namespace {

std::vector<std::vector<guardrails::BufferView>> group_views(const sigma_buffer_view_t* views, uint64_t n,
                                                             size_t layers) {
  if (n > 0 && views == nullptr) throw Error(Code::invalid_argument, "views is NULL");
  std::vector<std::vector<guardrails::BufferView>> out(layers);
  for (uint64_t i = 0; i < n; ++i) {
    if (views[i].layer >= layers)
      throw Error(Code::invalid_argument, "view " + std::to_string(i) + " names layer " +
                                              std::to_string(views[i].layer) + " of " +
                                              std::to_string(layers));
    out[views[i].layer].push_back({views[i].data, views[i].count, views[i].dtype});
  }
  return out;
}

std::vector<guardrails::BufferView> flat_views(const sigma_buffer_view_t* views, uint64_t n) {
  if (n > 0 && views == nullptr) throw Error(Code::invalid_argument, "params is NULL");
  std::vector<guardrails::BufferView> out;
  for (uint64_t i = 0; i < n; ++i) out.push_back({views[i].data, views[i].count, views[i].dtype});
  return out;
}

}  // namespace

extern "C" {

sigma_status_t sigma_guardrails_create(const sigma_guardrails_create_args_t* args, sigma_guardrails_t** out) {
  return capi::guarded("sigma_guardrails_create", [&] {
    if (args == nullptr || out == nullptr) throw Error(Code::invalid_argument, "args or out is NULL");
    if (args->struct_size < SIGMA_GUARDRAILS_CREATE_ARGS_V1_SIZE)
      throw Error(Code::invalid_argument,
                  "args->struct_size " + std::to_string(args->struct_size) +
                      " is smaller than sigma_guardrails_create_args_t's first version (" +
                      std::to_string(SIGMA_GUARDRAILS_CREATE_ARGS_V1_SIZE) + ")");
    const sigma_guardrails_create_args_t& a = *args;
    if (a.num_layers > 0 && a.layers == nullptr) throw Error(Code::invalid_argument, "layers is NULL");
    if ((a.plugin == nullptr) != (a.comm == nullptr))
      throw Error(Code::invalid_argument, "give both plugin and comm, or neither");
    auto cfg = a.config_path ? guardrails::Config::from_yaml_file(a.config_path) : guardrails::Config{};
    std::vector<guardrails::LayerInfo> ls;
    for (uint32_t i = 0; i < a.num_layers; ++i) {
      if (a.layers[i].name == nullptr)
        throw Error(Code::invalid_argument, "layer " + std::to_string(i) + " has no name");
      ls.push_back({a.layers[i].name, a.layers[i].dtype});
    }
    auto h = std::make_unique<sigma_guardrails_s>();
    if (a.comm) h->comm = hal::Communicator::borrow(capi::plugin_ptr(a.plugin), a.comm);
    guardrails::Group grp{
        h->comm.get(), a.device, a.rank, a.world,
        a.replicated ? guardrails::GradLayout::replicated : guardrails::GradLayout::sharded};
    h->g = std::make_unique<guardrails::Guardrails>(std::move(cfg), std::move(ls), grp);
    *out = h.release();
  });
}

void sigma_guardrails_destroy(sigma_guardrails_t* g) { delete g; }

sigma_status_t sigma_guardrails_step(sigma_guardrails_t* g, uint64_t step, double loss,
                                     const sigma_buffer_view_t* views, uint64_t num_views,
                                     sigma_guardrails_decision_t* decision) {
  return capi::guarded("sigma_guardrails_step", [&] {
    if (g == nullptr || decision == nullptr) throw Error(Code::invalid_argument, "g or decision is NULL");
    if (decision->struct_size < sizeof(sigma_guardrails_decision_t))
      throw Error(Code::invalid_argument, "decision->struct_size " + std::to_string(decision->struct_size) +
                                              " is smaller than this library's " +
                                              std::to_string(sizeof(sigma_guardrails_decision_t)));
    g->last = g->g->step(step, loss, group_views(views, num_views, g->g->layers().size()));
    const auto& d = g->last;
    g->escalate.clear();
    g->deescalate.clear();
    for (const auto& n : d.escalate) g->escalate.push_back(n.c_str());
    for (const auto& n : d.deescalate) g->deescalate.push_back(n.c_str());
    const uint64_t size = decision->struct_size;
    *decision = sigma_guardrails_decision_t{};
    decision->struct_size = size;
    decision->step = d.step;
    decision->action = static_cast<int32_t>(d.action);
    decision->loss = d.loss;
    decision->global_norm = d.global_norm;
    decision->clip_factor = d.clip_factor;
    decision->loss_scale = d.loss_scale;
    decision->next_loss_scale = d.next_loss_scale;
    decision->grad_multiplier = d.grad_multiplier;
    decision->non_finite = d.non_finite;
    decision->rollback_to_step = d.rollback_to_step;
    decision->skip_data_begin = d.skip_data_begin;
    decision->skip_data_end = d.skip_data_end;
    decision->reason = d.reason.c_str();
    decision->num_escalate = static_cast<uint32_t>(g->escalate.size());
    decision->escalate = g->escalate.data();
    decision->num_deescalate = static_cast<uint32_t>(g->deescalate.size());
    decision->deescalate = g->deescalate.data();
    decision->check_fingerprint = d.check_fingerprint ? 1 : 0;
  });
}

sigma_status_t sigma_guardrails_note_snapshot(sigma_guardrails_t* g, uint64_t step) {
  return capi::guarded("sigma_guardrails_note_snapshot", [&] {
    if (g == nullptr) throw Error(Code::invalid_argument, "g is NULL");
    g->g->note_snapshot(step);
  });
}

sigma_status_t sigma_guardrails_check_fingerprint(sigma_guardrails_t* g, uint64_t step,
                                                  const sigma_buffer_view_t* params, uint64_t num_params,
                                                  int32_t* match, int32_t* odd_rank) {
  return capi::guarded("sigma_guardrails_check_fingerprint", [&] {
    if (g == nullptr || match == nullptr) throw Error(Code::invalid_argument, "g or match is NULL");
    const auto r = g->g->check_fingerprint(step, flat_views(params, num_params));
    *match = r.match ? 1 : 0;
    if (odd_rank) *odd_rank = r.odd_ranks.size() == 1 ? r.odd_ranks[0] : -1;
  });
}

sigma_status_t sigma_guardrails_attribute_rerun(sigma_guardrails_t* g, uint64_t step,
                                                uint64_t rerun_fingerprint, const char* device,
                                                int32_t* faulty_rank) {
  return capi::guarded("sigma_guardrails_attribute_rerun", [&] {
    if (g == nullptr || faulty_rank == nullptr)
      throw Error(Code::invalid_argument, "g or faulty_rank is NULL");
    const auto f = g->g->attribute_rerun(step, rerun_fingerprint, device ? device : "(unnamed device)");
    *faulty_rank = f.empty() ? -1 : f[0];
  });
}

sigma_status_t sigma_fingerprint(const sigma_buffer_view_t* params, uint64_t num_params, uint64_t* out) {
  return capi::guarded("sigma_fingerprint", [&] {
    if (out == nullptr) throw Error(Code::invalid_argument, "out is NULL");
    *out = guardrails::fingerprint(flat_views(params, num_params));
  });
}

}  // extern "C"
