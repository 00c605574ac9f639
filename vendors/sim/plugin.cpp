// The sim vendor: an early-life accelerator. It wraps another vendor (cpu by
// default) through the real ABI and adds, from a seeded scenario file or on
// demand through the fault-injection extension, what early-life hardware
// does: drifting telemetry and faults.
//
// Options (hal_init_args_t.options, "key=value;..."):
//   scenario=PATH     the scenario (default: healthy, no events or faults)
//   inner=NAME        the wrapped vendor (default: the scenario's, else cpu)
//   rank=N            this process's global rank (default: SIGMA_RANK, else
//                     the rank of the first multi-rank communicator, else 0)
//   time_scale=X      scenario seconds per real second (overrides the file)
//   opaque=1          device memory the host cannot read (opaque.hpp): the
//                     device reports HAL_MEMORY_DEVICE and offers the kernels
//                     extension on it
//   kernels=0         every kernels-extension entry declines (NOT_SUPPORTED):
//                     the host stages device buffers through memcpy instead
//   inner.KEY=VALUE   passed to the wrapped vendor as KEY=VALUE
#include "opaque.hpp"
#include "sim.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>

namespace sim_vendor {
namespace {

thread_local std::string t_error;
State g_state;

}  // namespace

hal_status_t fail(hal_status_t status, std::string message) {
  t_error = std::move(message);
  return status;
}
const char* last_error() { return t_error.c_str(); }

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

State& state() { return g_state; }

void State::arm_scenario_faults() {
  faults.erase(
      std::remove_if(faults.begin(), faults.end(), [](const ActiveFault& f) { return f.from_scenario; }),
      faults.end());
  for (size_t i = 0; i < scenario.faults.size(); ++i) {
    const Fault& f = scenario.faults[i];
    if (f.device != rank) continue;
    ActiveFault a;
    a.index = i;
    a.kind = f.kind;
    if (f.at_s) a.from_s = *f.at_s;
    if (f.at_op) a.at_op = static_cast<int64_t>(*f.at_op);
    if (f.duration_s > 0) a.until_s = (f.at_s ? *f.at_s : 0) + f.duration_s;
    a.factor = f.factor;
    a.gbps = f.gbps;
    a.latency_us = f.latency_us;
    a.period_s = f.period_s;
    a.remaining = f.count;
    a.op = f.op;
    a.from_scenario = true;
    faults.push_back(a);
  }
}

void State::fire_due_locked() {
  const double t = now_s();
  for (auto& f : faults) {
    if (f.fired || f.from_s < 0 || t < f.from_s) continue;
    if (f.kind == FaultKind::device_lost) {
      f.fired = true;
      device_lost = true;
    } else if (f.kind == FaultKind::crash) {
      f.fired = true;
      // What a driver crash does to the process: it is gone, no cleanup.
      // Once per device and run: a worker restarted on it is not killed again.
      if (!f.from_scenario || run.first_strike(rank, f.index)) ::kill(::getpid(), SIGKILL);
    }
  }
}

bool poll_device_lost() {
  bool lost, newly;
  {
    std::lock_guard lk(g_state.mu);
    const bool was = g_state.device_lost;
    g_state.fire_due_locked();
    lost = g_state.device_lost;
    newly = lost && !was;
  }
  // What was in flight fails too (outside the state lock).
  if (newly) abort_all_comms_device_lost();
  return lost;
}

hal_status_t check_alive(uint32_t device) {
  if (device != 0)
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: no device " + std::to_string(device) + " (one per process)");
  {
    std::lock_guard lk(g_state.mu);
    if (g_state.refs == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: not initialised");
  }
  if (poll_device_lost()) {
    return fail(HAL_ERR_DEVICE_LOST, "sim: device lost (rank " + std::to_string(g_state.rank) +
                                         ", injected by the scenario or the fault extension)");
  }
  return HAL_OK;
}

namespace {

struct ParsedOptions {
  std::string scenario, inner, inner_options;
  std::optional<uint32_t> rank;
  std::optional<double> time_scale;
  bool opaque = false;
  bool kernels = true;
};

bool parse_options(const char* text, ParsedOptions& out, std::string& why) {
  std::stringstream ss(text ? text : "");
  std::string item;
  while (std::getline(ss, item, ';')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      why = "option '" + item + "' is not key=value";
      return false;
    }
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    char* end = nullptr;
    if (k == "scenario")
      out.scenario = v;
    else if (k == "inner")
      out.inner = v;
    else if (k.rfind("inner.", 0) == 0)
      out.inner_options += k.substr(6) + "=" + v + ";";
    else if (k == "rank") {
      const unsigned long r = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end) {
        why = "option rank='" + v + "' is not a whole number";
        return false;
      }
      out.rank = static_cast<uint32_t>(r);
    } else if (k == "time_scale") {
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !(x > 0)) {
        why = "option time_scale='" + v + "' is not a positive number";
        return false;
      }
      out.time_scale = x;
    } else if (k == "opaque" || k == "kernels") {
      if (v != "0" && v != "1") {
        why = "option " + k + "='" + v + "' is not 0 or 1";
        return false;
      }
      (k == "opaque" ? out.opaque : out.kernels) = v == "1";
    } else {
      why =
          "unknown option '" + k + "' (known: scenario, inner, rank, time_scale, opaque, kernels, inner.KEY)";
      return false;
    }
  }
  return true;
}

hal_status_t sim_init(const hal_init_args_t* args) {
  if (args == nullptr || args->struct_size < HAL_INIT_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: init args NULL or struct_size too small");
  std::lock_guard lk(g_state.mu);
  if (g_state.refs > 0) {
    ++g_state.refs;
    return HAL_OK;
  }
  ParsedOptions o;
  std::string why;
  if (!parse_options(args->options, o, why)) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: " + why);
  Scenario sc = healthy_scenario();
  if (!o.scenario.empty()) {
    auto loaded = load_scenario(o.scenario, why);
    if (!loaded) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: scenario refused: " + why);
    sc = *loaded;
  }
  if (o.time_scale) sc.time_scale = *o.time_scale;
  const std::string inner_name = o.inner.empty() ? sc.inner : o.inner;
  Inner inner;
  if (hal_status_t st = load_inner(inner_name, o.inner_options, inner); st != HAL_OK) return st;
  g_state.scenario = std::move(sc);
  g_state.inner = inner;
  opaque::set_enabled(o.opaque);
  opaque::set_kernels(o.kernels);
  g_state.rank_fixed = false;
  g_state.rank = 0;
  if (o.rank) {
    g_state.rank = *o.rank;
    g_state.rank_fixed = true;
  } else if (const char* env = std::getenv("SIGMA_RANK"); env != nullptr && *env) {
    g_state.rank = static_cast<uint32_t>(std::strtoul(env, nullptr, 10));
    g_state.rank_fixed = true;
  }
  g_state.run.open(args->job_dir != nullptr ? args->job_dir : "");
  g_state.t0_ns = g_state.run.origin(now_ns());
  g_state.ops_posted = 0;
  g_state.device_lost = false;
  g_state.allocated_bytes = 0;
  g_state.read_seq = 0;
  g_state.faults.clear();
  g_state.excursions.clear();
  g_state.arm_scenario_faults();
  g_state.refs = 1;
  return HAL_OK;
}

hal_status_t sim_finalize() {
  {
    std::lock_guard lk(g_state.mu);
    if (g_state.refs == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: finalize without init");
    if (--g_state.refs > 0) return HAL_OK;
  }
  destroy_all_comms();
  std::lock_guard lk(g_state.mu);
  unload_inner(g_state.inner);  // the inner's last finalize frees what we left there
  opaque::free_all();
  g_state.faults.clear();
  return HAL_OK;
}

const char* sim_get_last_error() { return last_error(); }

const hal_device_api_t& inner_dev() { return *g_state.inner.api->device; }

hal_status_t inner_status(hal_status_t st) {
  if (st < 0) return fail(st, std::string("sim: inner vendor: ") + g_state.inner.api->get_last_error());
  return st;
}

hal_status_t sim_get_count(uint32_t* count) {
  if (count == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: count is NULL");
  *count = 1;
  return HAL_OK;
}

hal_status_t sim_get_props(uint32_t device, hal_device_props_t* p) {
  if (p == nullptr || p->struct_size < HAL_DEVICE_PROPS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: props NULL or struct_size too small");
  if (hal_status_t st = check_alive(device); st != HAL_OK) return st;
  if (hal_status_t st = inner_status(inner_dev().get_props(0, p)); st != HAL_OK) return st;
  if (opaque::enabled()) p->memory_kind = HAL_MEMORY_DEVICE;
  const std::string name = "sim" + std::to_string(g_state.rank) + "(" + p->name + ")";
  std::snprintf(p->name, sizeof(p->name), "%.63s", name.c_str());
  return HAL_OK;
}

hal_status_t sim_mem_alloc(uint32_t device, uint64_t size, uint64_t alignment, void** ptr) {
  if (ptr == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: ptr is NULL");
  if (alignment != 0 && (alignment & (alignment - 1)) != 0)
    return fail(HAL_ERR_INVALID_ARGUMENT,
                "sim: alignment " + std::to_string(alignment) + " is not a power of two");
  if (hal_status_t st = check_alive(device); st != HAL_OK) return st;
  if (opaque::enabled()) {
    if (hal_status_t st = opaque::alloc(size, alignment, ptr); st != HAL_OK) return st;
  } else if (hal_status_t st = inner_status(inner_dev().mem_alloc(0, size, alignment, ptr)); st != HAL_OK) {
    return st;
  }
  std::lock_guard lk(g_state.mu);
  g_state.allocated_bytes += size;
  return HAL_OK;
}

hal_status_t sim_mem_free(uint32_t device, void* ptr) {
  if (ptr == nullptr) return HAL_OK;
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: no device " + std::to_string(device));
  // Freeing works on a lost device too: the host cleans up after a fault.
  if (opaque::enabled()) return opaque::release(ptr);
  return inner_status(inner_dev().mem_free(0, ptr));
}

hal_status_t sim_memcpy(uint32_t device, void* dst, const void* src, uint64_t size, hal_copy_kind_t kind,
                        hal_stream_t stream) {
  if (kind > HAL_COPY_DEVICE_TO_DEVICE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: unknown copy kind " + std::to_string(kind));
  if (size > 0 && (dst == nullptr || src == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: NULL buffer in memcpy");
  if (hal_status_t st = check_alive(device); st != HAL_OK) return st;
  if (opaque::enabled()) return opaque::copy(dst, src, size, kind);
  return inner_status(inner_dev().memcpy(0, dst, src, size, kind, stream));
}

hal_status_t sim_self_test(uint32_t device, uint64_t budget, hal_self_test_result_t* r) {
  if (r == nullptr || r->struct_size < HAL_SELF_TEST_RESULT_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: result NULL or struct_size too small");
  if (hal_status_t st = check_alive(device); st != HAL_OK) return st;
  return inner_status(inner_dev().self_test(0, budget, r));
}

hal_status_t sim_list_fields(uint32_t device, hal_field_info_t* fields, uint32_t capacity, uint32_t* count) {
  if (count == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: count is NULL");
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: no device " + std::to_string(device));
  const auto& all = sim_fields();
  *count = static_cast<uint32_t>(all.size());
  for (uint32_t i = 0; fields != nullptr && i < capacity && i < all.size(); ++i) fields[i] = all[i];
  return HAL_OK;
}

hal_status_t sim_read(uint32_t device, const hal_field_id_t* ids, uint32_t n,
                      hal_telemetry_sample_t* samples) {
  if (n > 0 && (ids == nullptr || samples == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: ids or samples is NULL");
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: no device " + std::to_string(device));
  synth_read(ids, n, samples);
  return HAL_OK;
}

hal_status_t sim_inject(const hal_fault_spec_t* spec) {
  if (spec == nullptr || spec->struct_size < HAL_FAULT_SPEC_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: fault spec NULL or struct_size too small");
  if (spec->device != 0)
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: no device " + std::to_string(spec->device));
  if (spec->kind >= HAL_FAULT_KIND_COUNT_V1)
    return fail(HAL_ERR_NOT_SUPPORTED, "sim: unknown fault kind " + std::to_string(spec->kind));
  bool lost_now = false;
  {
    std::lock_guard lk(g_state.mu);
    const double t = g_state.now_s();
    const double until = spec->duration_ns
                             ? t + static_cast<double>(spec->duration_ns) * 1e-9 * g_state.scenario.time_scale
                             : 1e300;
    if (spec->kind == HAL_FAULT_TELEMETRY_EXCURSION) {
      g_state.excursions.push_back({spec->field, spec->value, until});
      return HAL_OK;
    }
    if (spec->kind == HAL_FAULT_DEVICE_LOST && spec->after_ops == 0) {
      g_state.device_lost = true;
      lost_now = true;
    } else if (spec->kind == HAL_FAULT_CRASH && spec->after_ops == 0) {
      ::kill(::getpid(), SIGKILL);
    } else {
      ActiveFault a;
      static const FaultKind map[] = {FaultKind::device_lost,       FaultKind::hang,
                                      FaultKind::slow_link,         FaultKind::silent_corruption,
                                      FaultKind::silent_corruption, FaultKind::crash};
      a.kind = map[spec->kind];
      a.at_op = static_cast<int64_t>(g_state.ops_posted + spec->after_ops);
      a.until_s = until;
      if (spec->kind == HAL_FAULT_SLOW_LINK) {
        if (!(spec->factor >= 1)) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: slow link factor must be >= 1");
        a.factor = spec->factor;
      }
      g_state.faults.push_back(a);
    }
  }
  if (lost_now) abort_all_comms_device_lost();
  return HAL_OK;
}

hal_status_t sim_clear(uint32_t device) {
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: no device " + std::to_string(device));
  std::lock_guard lk(g_state.mu);
  g_state.device_lost = false;
  g_state.faults.clear();
  g_state.excursions.clear();
  return HAL_OK;
}

const hal_ext_fault_injection_t k_fault_ext = {
    .header = {.struct_size = sizeof(hal_ext_fault_injection_t),
               .type = HAL_EXT_FAULT_INJECTION,
               .reserved = 0,
               .next = &k_kernels_ext.header},
    .supported_kinds = (1u << HAL_FAULT_DEVICE_LOST) | (1u << HAL_FAULT_HANG) | (1u << HAL_FAULT_SLOW_LINK) |
                       (1u << HAL_FAULT_CORRUPT_RESULT) | (1u << HAL_FAULT_TELEMETRY_EXCURSION) |
                       (1u << HAL_FAULT_CRASH),
    .inject = sim_inject,
    .clear = sim_clear,
};

const hal_device_api_t k_device = {
    .struct_size = sizeof(hal_device_api_t),
    .get_count = sim_get_count,
    .get_props = sim_get_props,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .memcpy = sim_memcpy,
    .stream_create = nullptr,
    .stream_synchronize = nullptr,
    .stream_destroy = nullptr,
    .self_test = sim_self_test,
};

const hal_telemetry_api_t k_telemetry = {
    .struct_size = sizeof(hal_telemetry_api_t),
    .list_fields = sim_list_fields,
    .read = sim_read,
};

const hal_api_t k_api = {
    .struct_size = sizeof(hal_api_t),
    .abi_major = HAL_ABI_MAJOR,
    .abi_minor = HAL_ABI_MINOR,
    .name = "sim",
    .version = "0.1.0",
    // No HAL_CAP_HOST_MEMORY: with opaque=1 the memory is not the host's;
    // each device's memory_kind says.
    .capabilities = HAL_CAP_MULTI_RANK | HAL_CAP_FAULT_INJECTION | HAL_CAP_KERNELS,
    .extensions = &k_fault_ext.header,
    .init = sim_init,
    .finalize = sim_finalize,
    .get_last_error = sim_get_last_error,
    .device = &k_device,
    .telemetry = &k_telemetry,
    .coll = &k_sim_coll,
};

}  // namespace
}  // namespace sim_vendor

extern "C" HAL_EXPORT const hal_api_t* hal_get_api_v1(uint32_t host_major, uint32_t host_minor) {
  (void)host_minor;
  return host_major == HAL_ABI_MAJOR ? &sim_vendor::k_api : nullptr;
}
