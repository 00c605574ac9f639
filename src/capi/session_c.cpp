// The worker session's C API over sigma::runtime::Session.
#include <sigma/sigma.h>
#include <sigma/runtime.hpp>

#include "capi.hpp"

#include <cstdlib>
#include <vector>

using namespace sigma;

struct sigma_session_s {
  std::unique_ptr<runtime::Session> s;
  std::vector<std::string> names;
};

extern "C" {

int32_t sigma_session_under_agent(void) { return runtime::Session::under_agent() ? 1 : 0; }

sigma_status_t sigma_session_create(sigma_session_t** out) {
  return capi::guarded("sigma_session_create", [&] {
    if (out == nullptr) throw Error(Code::invalid_argument, "out is NULL");
    auto h = std::make_unique<sigma_session_s>();
    h->s = std::make_unique<runtime::Session>();
    *out = h.release();
  });
}

void sigma_session_destroy(sigma_session_t* s) { delete s; }

sigma_status_t sigma_session_set_state(sigma_session_t* s, const sigma_state_view_t* views, uint32_t n) {
  return capi::guarded("sigma_session_set_state", [&] {
    if (s == nullptr) throw Error(Code::invalid_argument, "session is NULL");
    s->s->set_state(capi::state_views(views, n));
  });
}

sigma_status_t sigma_session_join(sigma_session_t* s, uint64_t* next_step) {
  return capi::guarded("sigma_session_join", [&] {
    if (s == nullptr || next_step == nullptr)
      throw Error(Code::invalid_argument, "session or next_step is NULL");
    *next_step = s->s->join();
  });
}

sigma_status_t sigma_session_info(const sigma_session_t* s, uint32_t* rank, uint32_t* world,
                                  uint64_t* generation) {
  return capi::guarded("sigma_session_info", [&] {
    if (s == nullptr) throw Error(Code::invalid_argument, "session is NULL");
    if (rank) *rank = s->s->rank();
    if (world) *world = s->s->world_size();
    if (generation) *generation = s->s->generation();
  });
}

hal_comm_t sigma_session_comm(sigma_session_t* s) {
  if (s == nullptr) return nullptr;
  try {
    return s->s->comm().handle();
  } catch (const Error&) {
    return nullptr;
  }
}

const hal_api_t* sigma_session_api(const sigma_session_t* s) {
  if (s == nullptr || !s->s->plugin()) return nullptr;
  return &s->s->plugin()->api();
}

sigma_status_t sigma_session_step_begin(sigma_session_t* s, uint64_t step) {
  return capi::guarded("sigma_session_step_begin", [&] {
    if (s == nullptr) throw Error(Code::invalid_argument, "session is NULL");
    s->s->step_begin(step);
  });
}

sigma_status_t sigma_session_step_end(sigma_session_t* s, uint64_t step) {
  return capi::guarded("sigma_session_step_end", [&] {
    if (s == nullptr) throw Error(Code::invalid_argument, "session is NULL");
    s->s->step_end(step);
  });
}

int32_t sigma_session_should_migrate(const sigma_session_t* s) { return s && s->s->should_migrate() ? 1 : 0; }
int32_t sigma_session_ended(const sigma_session_t* s) { return s && s->s->ended() ? 1 : 0; }

sigma_status_t sigma_session_recover_status(sigma_session_t* s, sigma_status_t failed, const char* reason,
                                            uint64_t* next_step) {
  return capi::guarded("sigma_session_recover_status", [&] {
    if (s == nullptr || next_step == nullptr)
      throw Error(Code::invalid_argument, "session or next_step is NULL");
    const Code code = capi::code_of(failed);
    *next_step = s->s->recover(code, std::string(code_name(code)) + ": " + (reason ? reason : ""));
  });
}

sigma_status_t sigma_session_recover(sigma_session_t* s, const char* reason, uint64_t* next_step) {
  return capi::guarded("sigma_session_recover", [&] {
    if (s == nullptr || next_step == nullptr)
      throw Error(Code::invalid_argument, "session or next_step is NULL");
    *next_step = s->s->recover(reason ? reason : "");
  });
}

sigma_status_t sigma_session_finish(sigma_session_t* s, uint64_t steps_done) {
  return capi::guarded("sigma_session_finish", [&] {
    if (s == nullptr) throw Error(Code::invalid_argument, "session is NULL");
    s->s->finish(steps_done);
  });
}

sigma_status_t sigma_session_step_end_report(sigma_session_t* s, uint64_t step,
                                             const sigma_step_report_t* report) {
  return capi::guarded("sigma_session_step_end_report", [&] {
    if (s == nullptr) throw Error(Code::invalid_argument, "session is NULL");
    if (report == nullptr) return s->s->step_end(step);
    if (report->struct_size < SIGMA_STEP_REPORT_V1_SIZE)
      throw Error(Code::invalid_argument, "report struct_size " + std::to_string(report->struct_size) +
                                              " is below the first version's " +
                                              std::to_string(SIGMA_STEP_REPORT_V1_SIZE));
    runtime::StepReport r;
    if (report->has_loss) r.loss = report->loss;
    r.tokens = report->tokens;
    r.flops = report->flops;
    r.peak_flops = report->peak_flops;
    if (report->note) r.note = report->note;
    s->s->step_end(step, r);
  });
}

int32_t sigma_session_should_checkpoint(const sigma_session_t* s, uint64_t step) {
  return s && s->s->should_checkpoint(step) ? 1 : 0;
}

sigma_status_t sigma_session_rollback(sigma_session_t* s, uint64_t index, uint64_t* next_step) {
  return capi::guarded("sigma_session_rollback", [&] {
    if (s == nullptr || next_step == nullptr)
      throw Error(Code::invalid_argument, "session or next_step is NULL");
    *next_step = s->s->rollback(index);
  });
}

sigma_status_t sigma_session_rollback_skipping(sigma_session_t* s, uint64_t index, uint64_t skip_begin,
                                               uint64_t skip_end, uint64_t* next_step) {
  return capi::guarded("sigma_session_rollback_skipping", [&] {
    if (s == nullptr || next_step == nullptr)
      throw Error(Code::invalid_argument, "session or next_step is NULL");
    *next_step = s->s->rollback(runtime::Rollback{index, skip_begin, skip_end, ""});
  });
}

sigma_status_t sigma_session_batch_of(const sigma_session_t* s, uint64_t step, uint64_t* batch) {
  return capi::guarded("sigma_session_batch_of", [&] {
    if (s == nullptr || batch == nullptr) throw Error(Code::invalid_argument, "session or batch is NULL");
    *batch = s->s->batch_of(step);
  });
}

}  // extern "C"
