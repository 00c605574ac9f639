// The health monitor's C API over sigma::health::Monitor.
#include <sigma/sigma.h>
#include <sigma/health.hpp>

#include "capi.hpp"

#include <memory>
#include <mutex>
#include <set>
#include <string>

using namespace sigma;

struct sigma_health_s {
  std::unique_ptr<health::Monitor> monitor;
  std::mutex mu;               // guards what follows (the monitor has its own)
  std::set<uint32_t> devices;  // observed at least once
};

namespace {

// The reason text of each thread's last query: queries may run concurrently.
thread_local std::string t_reason;

health::Config config_of(const sigma_health_create_args_t* a) {
  health::Config c;
  if (a == nullptr) return c;
  if (a->struct_size < SIGMA_HEALTH_CREATE_ARGS_V1_SIZE)
    throw Error(Code::invalid_argument, "args struct_size " + std::to_string(a->struct_size) +
                                            " is below the first version's " +
                                            std::to_string(SIGMA_HEALTH_CREATE_ARGS_V1_SIZE));
  if (a->warn_c != 0) c.warn_c = a->warn_c;
  if (a->critical_c != 0) c.critical_c = a->critical_c;
  if (a->heartbeat_timeout_s != 0) c.heartbeat_timeout_s = a->heartbeat_timeout_s;
  if (a->ecc_per_min_suspect != 0) c.ecc_per_min_suspect = a->ecc_per_min_suspect;
  health::validate(c);
  return c;
}

health::Monitor& seen(sigma_health_t* h, uint32_t device) {
  if (h == nullptr) throw Error(Code::invalid_argument, "monitor is NULL");
  std::lock_guard<std::mutex> lock(h->mu);
  if (h->devices.insert(device).second) h->monitor->add_device(device);
  return *h->monitor;
}

}  // namespace

extern "C" {

sigma_status_t sigma_health_create(const sigma_health_create_args_t* args, sigma_health_t** out) {
  return capi::guarded("sigma_health_create", [&] {
    if (out == nullptr) throw Error(Code::invalid_argument, "out is NULL");
    auto h = std::make_unique<sigma_health_s>();
    h->monitor = std::make_unique<health::Monitor>(config_of(args));
    *out = h.release();
  });
}

void sigma_health_destroy(sigma_health_t* h) { delete h; }

sigma_status_t sigma_health_observe_telemetry(sigma_health_t* h, uint32_t device, double t_s,
                                              const hal_telemetry_sample_t* samples, uint64_t num_samples) {
  return capi::guarded("sigma_health_observe_telemetry", [&] {
    if (num_samples > 0 && samples == nullptr) throw Error(Code::invalid_argument, "samples is NULL");
    seen(h, device).observe_telemetry(device, t_s, samples, num_samples);
  });
}

sigma_status_t sigma_health_observe_step(sigma_health_t* h, uint32_t device, uint64_t step,
                                         double step_time_s, double t_s) {
  return capi::guarded("sigma_health_observe_step",
                       [&] { seen(h, device).observe_step(device, step, step_time_s, t_s); });
}

sigma_status_t sigma_health_observe_heartbeat(sigma_health_t* h, uint32_t device, double t_s) {
  return capi::guarded("sigma_health_observe_heartbeat",
                       [&] { seen(h, device).observe_heartbeat(device, t_s); });
}

sigma_status_t sigma_health_evaluate(sigma_health_t* h, double t_s, uint32_t* num_events) {
  return capi::guarded("sigma_health_evaluate", [&] {
    if (h == nullptr) throw Error(Code::invalid_argument, "monitor is NULL");
    const auto events = h->monitor->evaluate(t_s);
    if (num_events) *num_events = static_cast<uint32_t>(events.size());
  });
}

sigma_status_t sigma_health_query(sigma_health_t* h, uint32_t device, sigma_device_health_t* out) {
  return capi::guarded("sigma_health_query", [&] {
    if (h == nullptr || out == nullptr) throw Error(Code::invalid_argument, "monitor or out is NULL");
    if (out->struct_size < SIGMA_DEVICE_HEALTH_V1_SIZE)
      throw Error(Code::invalid_argument, "out struct_size " + std::to_string(out->struct_size) +
                                              " is below the first version's " +
                                              std::to_string(SIGMA_DEVICE_HEALTH_V1_SIZE));
    std::lock_guard<std::mutex> lock(h->mu);
    if (!h->devices.count(device))
      throw Error(Code::invalid_argument, "device " + std::to_string(device) + " was never observed");
    const health::DeviceHealth d = h->monitor->device(device);
    t_reason = d.warnings.empty() ? "" : d.warnings.front().message;
    out->state = static_cast<int32_t>(d.state);
    out->num_warnings = static_cast<uint32_t>(d.warnings.size());
    out->score = d.score;
    out->reason = t_reason.c_str();
  });
}

}  // extern "C"
