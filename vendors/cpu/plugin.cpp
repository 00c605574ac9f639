// The cpu vendor: one device per process (this host's CPUs and memory),
// collectives on Gloo over TCP, telemetry from Linux. Exports hal_get_api_v1.
#include "comm.hpp"
#include "common.hpp"
#include "telemetry.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

struct hal_comm_s {
  std::unique_ptr<cpu_vendor::Comm> comm;
};

struct hal_request_s {
  std::shared_ptr<cpu_vendor::RequestState> state;
  hal_comm_s* comm;  // nullptr once the comm was destroyed
};

namespace cpu_vendor {
namespace {

thread_local std::string t_error;

// Plugin-wide state; g_mu guards all of it.
std::mutex g_mu;
int g_refs = 0;
Options g_options;
std::unique_ptr<Telemetry> g_telemetry;
std::map<void*, uint64_t> g_allocs;  // pointer -> size
std::set<hal_comm_s*> g_comms;
std::set<hal_request_s*> g_requests;

constexpr uint64_t kHugePage = 2ull << 20;

uint64_t mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

// Theoretical peak FLOP/s: cores x clock x FLOP per cycle of the widest FMA
// units the CPU reports. f16/bf16 run through f32 units here.
void fill_peak_flops(hal_device_props_t& p) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  double mhz = 0;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0 && flags.empty()) flags = line;
    if (line.rfind("cpu MHz", 0) == 0 && mhz == 0) mhz = std::atof(line.c_str() + line.find(':') + 1);
  }
  auto has = [&](const char* f) { return flags.find(std::string(" ") + f) != std::string::npos; };
  double f32_per_cycle = 8;  // SSE: 4-wide mul + add
  if (has("avx512f"))
    f32_per_cycle = 64;
  else if (has("avx2") && has("fma"))
    f32_per_cycle = 32;
  else if (has("avx"))
    f32_per_cycle = 16;
  const double cores = static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN));
  const double f32 = cores * mhz * 1e6 * f32_per_cycle;
  p.peak_flops[HAL_DTYPE_F32] = f32;
  p.peak_flops[HAL_DTYPE_F16] = f32;
  p.peak_flops[HAL_DTYPE_BF16] = f32;
  p.peak_flops[HAL_DTYPE_F64] = f32 / 2;
}

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

bool parse_options(const char* text, Options& out, std::string& why) {
  if (text == nullptr) return true;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ';')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      why = "option '" + item + "' is not key=value";
      return false;
    }
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "host")
      out.host = v;
    else if (k == "iface")
      out.iface = v;
    else if (k == "op_timeout_ms") {
      char* end = nullptr;
      out.op_timeout_ms = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || out.op_timeout_ms == 0) {
        why = "option op_timeout_ms='" + v + "' is not a positive integer";
        return false;
      }
    } else if (k == "store") {
      if (v != "callbacks" && v != "auto") {
        why = "option store='" + v + "' must be 'callbacks' or 'auto'";
        return false;
      }
      out.force_callback_store = v == "callbacks";
    } else if (k == "telemetry_root") {
      out.telemetry_root = v;
    } else {
      why = "unknown option '" + k + "' (known: host, iface, op_timeout_ms, store, telemetry_root)";
      return false;
    }
  }
  return true;
}

bool initialised() {
  std::lock_guard lk(g_mu);
  return g_refs > 0;
}
const Options& options() { return g_options; }

hal_status_t check_device(uint32_t device) {
  if (!initialised()) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: not initialised");
  if (device != 0)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: no device " + std::to_string(device) + " (one per process)");
  return HAL_OK;
}

namespace {

hal_status_t cpu_init(const hal_init_args_t* args) {
  if (args == nullptr || args->struct_size < HAL_INIT_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: init args NULL or struct_size too small");
  std::lock_guard lk(g_mu);
  if (g_refs == 0) {
    Options opts;
    std::string why;
    if (!parse_options(args->options, opts, why)) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: " + why);
    g_options = opts;
    g_telemetry = std::make_unique<Telemetry>(opts.telemetry_root);
    // Gloo writes to peers' sockets without MSG_NOSIGNAL on some paths: a
    // peer that died would kill this process with SIGPIPE instead of
    // failing the collective with REMOTE_ERROR. Only the default action is
    // replaced; a handler the host installed is left alone.
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  }
  ++g_refs;
  return HAL_OK;
}

hal_status_t cpu_finalize() {
  std::set<hal_comm_s*> comms;
  std::set<hal_request_s*> reqs;
  std::map<void*, uint64_t> allocs;
  {
    std::lock_guard lk(g_mu);
    if (g_refs == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: finalize without init");
    if (--g_refs > 0) return HAL_OK;
    comms.swap(g_comms);
    reqs.swap(g_requests);
    allocs.swap(g_allocs);
  }
  // Communicators first: destroying one aborts and joins its worker, so no
  // thread still touches the memory freed below.
  for (auto* c : comms) delete c;
  for (auto* r : reqs) delete r;
  for (auto& [p, size] : allocs) {
    (void)size;
    std::free(p);
  }
  reset_tcp_device();
  stop_deadline_watchdog();
  std::lock_guard lk(g_mu);
  g_telemetry.reset();
  return HAL_OK;
}

const char* cpu_get_last_error() { return last_error(); }

hal_status_t cpu_get_count(uint32_t* count) {
  if (count == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: count is NULL");
  *count = 1;
  return HAL_OK;
}

hal_status_t cpu_get_props(uint32_t device, hal_device_props_t* p) {
  if (p == nullptr || p->struct_size < HAL_DEVICE_PROPS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: props NULL or struct_size too small");
  if (hal_status_t st = check_device(device); st != HAL_OK) return st;
  const uint64_t size = p->struct_size;
  std::memset(p, 0, sizeof(*p));
  p->struct_size = size;
  char host[64] = {0};
  ::gethostname(host, sizeof(host) - 1);
  // The name holds 63 characters: the host's is cut to the 58 after "cpu0@".
  static_assert(sizeof(p->name) == 64);
  std::snprintf(p->name, sizeof(p->name), "cpu0@%.58s", host);
  std::ifstream id("/etc/machine-id");
  std::string machine;
  id >> machine;
  std::snprintf(p->uuid, sizeof(p->uuid), "cpu-%.32s", machine.c_str());
  p->memory_kind = HAL_MEMORY_HOST;
  p->memory_bytes = mem_total_bytes();
  p->alignment_bytes = 64;
  fill_peak_flops(*p);
  return HAL_OK;
}

hal_status_t cpu_mem_alloc(uint32_t device, uint64_t size, uint64_t alignment, void** ptr) {
  if (ptr == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: ptr is NULL");
  if (alignment != 0 && (alignment & (alignment - 1)) != 0)
    return fail(HAL_ERR_INVALID_ARGUMENT,
                "cpu: alignment " + std::to_string(alignment) + " is not a power of two");
  if (hal_status_t st = check_device(device); st != HAL_OK) return st;
  // Large buffers are 2 MiB aligned and offered to transparent huge pages.
  alignment = std::max<uint64_t>({alignment, 64, size >= kHugePage ? kHugePage : 0});
  void* p = nullptr;
  if (::posix_memalign(&p, alignment, size ? size : 1) != 0)
    return fail(HAL_ERR_OUT_OF_MEMORY, "cpu: posix_memalign(" + std::to_string(size) + " bytes) failed");
  if (size >= kHugePage) ::madvise(p, size, MADV_HUGEPAGE);
  std::lock_guard lk(g_mu);
  g_allocs[p] = size;
  *ptr = p;
  return HAL_OK;
}

hal_status_t cpu_mem_free(uint32_t device, void* ptr) {
  if (ptr == nullptr) return HAL_OK;
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: no device " + std::to_string(device));
  {
    std::lock_guard lk(g_mu);
    auto it = g_allocs.find(ptr);
    if (it == g_allocs.end())
      return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: pointer was not allocated by this plugin");
    g_allocs.erase(it);
  }
  std::free(ptr);
  return HAL_OK;
}

hal_status_t cpu_memcpy(uint32_t device, void* dst, const void* src, uint64_t size, hal_copy_kind_t kind,
                        hal_stream_t) {
  if (kind > HAL_COPY_DEVICE_TO_DEVICE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: unknown copy kind " + std::to_string(kind));
  if (size > 0 && (dst == nullptr || src == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: NULL buffer in memcpy");
  if (hal_status_t st = check_device(device); st != HAL_OK) return st;
  if (size > 0) std::memmove(dst, src, size);
  return HAL_OK;
}

hal_status_t cpu_list_fields(uint32_t device, hal_field_info_t* fields, uint32_t capacity, uint32_t* count) {
  if (count == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: count is NULL");
  if (hal_status_t st = check_device(device); st != HAL_OK) return st;
  const auto& all = g_telemetry->fields();
  *count = static_cast<uint32_t>(all.size());
  for (uint32_t i = 0; fields != nullptr && i < capacity && i < all.size(); ++i) fields[i] = all[i];
  return HAL_OK;
}

hal_status_t cpu_read(uint32_t device, const hal_field_id_t* ids, uint32_t n,
                      hal_telemetry_sample_t* samples) {
  if (n > 0 && (ids == nullptr || samples == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: ids or samples is NULL");
  if (hal_status_t st = check_device(device); st != HAL_OK) return st;
  g_telemetry->read(ids, n, samples);
  return HAL_OK;
}

hal_status_t cpu_comm_create(const hal_comm_create_args_t* args, hal_comm_t* comm) {
  if (args == nullptr || comm == nullptr || args->struct_size < HAL_COMM_CREATE_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: comm args NULL or struct_size too small");
  Comm* c = nullptr;
  if (hal_status_t st = Comm::create(*args, &c); st != HAL_OK) return st;
  auto* h = new hal_comm_s{std::unique_ptr<Comm>(c)};
  std::lock_guard lk(g_mu);
  g_comms.insert(h);
  *comm = h;
  return HAL_OK;
}

bool live(hal_comm_t comm) {
  std::lock_guard lk(g_mu);
  return comm != nullptr && g_comms.count(comm) > 0;
}

hal_status_t cpu_comm_destroy(hal_comm_t comm) {
  {
    std::lock_guard lk(g_mu);
    if (comm == nullptr || g_comms.erase(comm) == 0)
      return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: unknown comm");
    for (auto* r : g_requests)
      if (r->comm == comm) r->comm = nullptr;
  }
  delete comm;  // aborts what is pending and joins the worker
  return HAL_OK;
}

hal_status_t cpu_comm_abort(hal_comm_t comm) {
  if (!live(comm)) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: unknown comm");
  comm->comm->abort();
  return HAL_OK;
}

hal_status_t cpu_get_async_error(hal_comm_t comm, hal_status_t* error) {
  if (error == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: error is NULL");
  if (!live(comm)) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: unknown comm");
  *error = comm->comm->async_error();
  return HAL_OK;
}

hal_status_t cpu_post(hal_comm_t comm, const hal_coll_args_t* args, hal_stream_t, hal_request_t* request) {
  if (args == nullptr || request == nullptr || args->struct_size < HAL_COLL_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: args/request NULL or struct_size too small");
  if (!live(comm)) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: unknown comm");
  std::shared_ptr<RequestState> state;
  if (hal_status_t st = comm->comm->post(*args, state); st != HAL_OK) return st;
  auto* r = new hal_request_s{std::move(state), comm};
  std::lock_guard lk(g_mu);
  g_requests.insert(r);
  *request = r;
  return HAL_OK;
}

hal_status_t cpu_run(hal_comm_t comm, const hal_coll_args_t* args, hal_stream_t, uint64_t timeout_ns) {
  if (args == nullptr || args->struct_size < HAL_COLL_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: args NULL or struct_size too small");
  if (!live(comm)) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: unknown comm");
  return comm->comm->run_to_end(*args, timeout_ns);
}

hal_status_t finished(hal_request_t r, hal_status_t st) {
  if (st < 0) {
    std::lock_guard lk(r->state->mu);
    return fail(st, "cpu: the operation failed: " + r->state->message);
  }
  return st;
}

hal_status_t cpu_test(hal_request_t r) {
  if (r == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: request is NULL");
  hal_status_t st;
  {
    std::lock_guard lk(r->state->mu);
    st = r->state->status;
  }
  return finished(r, st);
}

hal_status_t cpu_wait(hal_request_t r, uint64_t timeout_ns) {
  if (r == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: request is NULL");
  hal_status_t st;
  {
    std::unique_lock lk(r->state->mu);
    auto done = [&] { return r->state->status != HAL_IN_PROGRESS; };
    if (timeout_ns >= (uint64_t{1} << 62))
      r->state->cv.wait(lk, done);
    else
      r->state->cv.wait_for(lk, std::chrono::nanoseconds(timeout_ns), done);
    st = r->state->status;
  }
  if (st == HAL_IN_PROGRESS)
    return timeout_ns == 0 ? HAL_IN_PROGRESS
                           : fail(HAL_ERR_TIMEOUT,
                                  "cpu: operation still running after " + std::to_string(timeout_ns) + " ns");
  return finished(r, st);
}

hal_status_t cpu_request_free(hal_request_t r) {
  if (r == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: request is NULL");
  std::lock_guard lk(g_mu);
  if (g_requests.count(r) == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: unknown request");
  bool running;
  {
    std::lock_guard slk(r->state->mu);
    running = r->state->status == HAL_IN_PROGRESS;
  }
  if (running && r->comm != nullptr && !r->comm->comm->aborted())
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: request still running; abort its comm first");
  g_requests.erase(r);
  delete r;
  return HAL_OK;
}

const hal_device_api_t k_device = {
    .struct_size = sizeof(hal_device_api_t),
    .get_count = cpu_get_count,
    .get_props = cpu_get_props,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .memcpy = cpu_memcpy,
    .stream_create = nullptr,
    .stream_synchronize = nullptr,
    .stream_destroy = nullptr,
    .self_test = self_test,
};

const hal_telemetry_api_t k_telemetry = {
    .struct_size = sizeof(hal_telemetry_api_t),
    .list_fields = cpu_list_fields,
    .read = cpu_read,
};

const hal_coll_api_t k_coll = {
    .struct_size = sizeof(hal_coll_api_t),
    .comm_create = cpu_comm_create,
    .comm_destroy = cpu_comm_destroy,
    .comm_abort = cpu_comm_abort,
    .comm_get_async_error = cpu_get_async_error,
    .post = cpu_post,
    .test = cpu_test,
    .wait = cpu_wait,
    .request_free = cpu_request_free,
    .run = cpu_run,
};

const hal_api_t k_api = {
    .struct_size = sizeof(hal_api_t),
    .abi_major = HAL_ABI_MAJOR,
    .abi_minor = HAL_ABI_MINOR,
    .name = "cpu",
    .version = "0.1.0",
    .capabilities = HAL_CAP_MULTI_RANK | HAL_CAP_HOST_MEMORY,
    .extensions = nullptr,
    .init = cpu_init,
    .finalize = cpu_finalize,
    .get_last_error = cpu_get_last_error,
    .device = &k_device,
    .telemetry = &k_telemetry,
    .coll = &k_coll,
};

}  // namespace
}  // namespace cpu_vendor

extern "C" HAL_EXPORT const hal_api_t* hal_get_api_v1(uint32_t host_major, uint32_t host_minor) {
  (void)host_minor;
  return host_major == HAL_ABI_MAJOR ? &cpu_vendor::k_api : nullptr;
}
