// Telemetry from NVML, loaded with dlopen("libnvidia-ml.so.1") so that the
// plugin builds and loads where no NVML exists. The few entry points used
// are declared here from NVML's documented C signatures; no NVML header is
// needed. A field this GPU or driver lacks reads as NOT_SUPPORTED.
#include "cuda.hpp"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

namespace cuda_vendor {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr int NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2;
constexpr int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0;
constexpr int NVML_NVLINK_ERROR_DL_REPLAY = 0, NVML_NVLINK_ERROR_DL_RECOVERY = 1,
              NVML_NVLINK_ERROR_DL_CRC_FLIT = 2;
constexpr int NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT = 0, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT = 1;
constexpr unsigned kMaxNvLinks = 18;
// Bits of nvmlDeviceGetCurrentClocksEventReasons.
constexpr unsigned long long kSwPowerCap = 0x4, kHwSlowdown = 0x8, kSwThermal = 0x20, kHwThermal = 0x40,
                             kHwPowerBrake = 0x80;

struct Utilization {
  unsigned gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};

struct Nvml {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*max_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, Utilization*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, Memory*) = nullptr;
  nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
  nvmlReturn_t (*throttle)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*nvlink_errors)(nvmlDevice_t, unsigned, int, unsigned long long*) = nullptr;
  nvmlReturn_t (*retired)(nvmlDevice_t, int, unsigned*, unsigned long long*) = nullptr;
  bool ok = false;
};

std::mutex g_mu;  // guards g_nvml's loading and unloading
Nvml g_nvml;

template <typename F>
void sym(F& f, const char* name) {
  f = reinterpret_cast<F>(::dlsym(g_nvml.lib, name));
}

// The NVML handle of CUDA device `device` (by UUID: CUDA and NVML may
// number devices differently under CUDA_VISIBLE_DEVICES).
nvmlDevice_t handle(uint32_t device) {
  if (!g_nvml.ok) return nullptr;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, static_cast<int>(device)) != cudaSuccess) return nullptr;
  char uuid[64];
  char* u = uuid + std::snprintf(uuid, sizeof uuid, "GPU-");
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  for (int i = 0; i < 16; ++i) {
    u += std::snprintf(u, 3, "%02x", b[i]);
    if (i == 3 || i == 5 || i == 7 || i == 9) *u++ = '-';
  }
  *u = '\0';
  nvmlDevice_t h = nullptr;
  if (g_nvml.by_uuid && g_nvml.by_uuid(uuid, &h) == NVML_SUCCESS) return h;
  return g_nvml.by_index && g_nvml.by_index(device, &h) == NVML_SUCCESS ? h : nullptr;
}

struct FieldDef {
  hal_field_id_t id;
  hal_value_type_t type;
  uint32_t flags;
  const char* name;
  const char* unit;
};
const FieldDef kFields[] = {
    {HAL_FIELD_TEMPERATURE_C, HAL_VALUE_F64, 0, "temperature", "C"},
    {HAL_FIELD_POWER_W, HAL_VALUE_F64, 0, "power", "W"},
    {HAL_FIELD_ENERGY_J, HAL_VALUE_F64, HAL_FIELD_FLAG_MONOTONIC, "energy", "J"},
    {HAL_FIELD_CLOCK_COMPUTE_MHZ, HAL_VALUE_F64, 0, "clock_sm", "MHz"},
    {HAL_FIELD_CLOCK_MEMORY_MHZ, HAL_VALUE_F64, 0, "clock_memory", "MHz"},
    {HAL_FIELD_UTILIZATION_PCT, HAL_VALUE_F64, 0, "utilization", "%"},
    {HAL_FIELD_MEMORY_USED_BYTES, HAL_VALUE_U64, 0, "memory_used", "B"},
    {HAL_FIELD_MEMORY_TOTAL_BYTES, HAL_VALUE_U64, 0, "memory_total", "B"},
    {HAL_FIELD_ECC_CORRECTABLE, HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, "ecc_correctable_volatile", "count"},
    {HAL_FIELD_ECC_UNCORRECTABLE, HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, "ecc_uncorrectable_volatile",
     "count"},
    {HAL_FIELD_LINK_ERRORS, HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, "nvlink_crc_errors", "count"},
    {HAL_FIELD_LINK_RETRIES, HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, "nvlink_replays", "count"},
    {HAL_FIELD_THROTTLE_REASONS, HAL_VALUE_U64, 0, "throttle_reasons", ""},
    {HAL_FIELD_RETIRED_PAGES, HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, "retired_pages", "count"},
};

// One field's value; the NVML status says whether there is one.
nvmlReturn_t read_one(nvmlDevice_t h, hal_field_id_t id, hal_value_t& v) {
  const Nvml& n = g_nvml;
  unsigned u = 0;
  unsigned long long ull = 0;
  nvmlReturn_t r = NVML_ERROR_NOT_SUPPORTED;
  switch (id) {
    case HAL_FIELD_TEMPERATURE_C:
      if (n.temperature && (r = n.temperature(h, NVML_TEMPERATURE_GPU, &u)) == NVML_SUCCESS) v.f64 = u;
      break;
    case HAL_FIELD_POWER_W:
      if (n.power && (r = n.power(h, &u)) == NVML_SUCCESS) v.f64 = u / 1000.0;  // mW
      break;
    case HAL_FIELD_ENERGY_J:
      if (n.energy && (r = n.energy(h, &ull)) == NVML_SUCCESS)
        v.f64 = static_cast<double>(ull) / 1000.0;  // mJ
      break;
    case HAL_FIELD_CLOCK_COMPUTE_MHZ:
    case HAL_FIELD_CLOCK_MEMORY_MHZ:
      if (n.clock && (r = n.clock(h, id == HAL_FIELD_CLOCK_COMPUTE_MHZ ? NVML_CLOCK_SM : NVML_CLOCK_MEM,
                                  &u)) == NVML_SUCCESS)
        v.f64 = u;
      break;
    case HAL_FIELD_UTILIZATION_PCT: {
      Utilization ut{};
      if (n.utilization && (r = n.utilization(h, &ut)) == NVML_SUCCESS) v.f64 = ut.gpu;
      break;
    }
    case HAL_FIELD_MEMORY_USED_BYTES:
    case HAL_FIELD_MEMORY_TOTAL_BYTES: {
      Memory m{};
      if (n.memory && (r = n.memory(h, &m)) == NVML_SUCCESS)
        v.u64 = id == HAL_FIELD_MEMORY_USED_BYTES ? m.used : m.total;
      break;
    }
    case HAL_FIELD_ECC_CORRECTABLE:
    case HAL_FIELD_ECC_UNCORRECTABLE:
      if (n.ecc && (r = n.ecc(h,
                              id == HAL_FIELD_ECC_CORRECTABLE ? NVML_MEMORY_ERROR_TYPE_CORRECTED
                                                              : NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                              NVML_VOLATILE_ECC, &ull)) == NVML_SUCCESS)
        v.u64 = ull;
      break;
    case HAL_FIELD_LINK_ERRORS:
    case HAL_FIELD_LINK_RETRIES: {
      // Summed over the links that answer; none answering: not supported.
      if (!n.nvlink_errors) break;
      uint64_t total = 0;
      bool any = false;
      const int counters[] = {NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_REPLAY,
                              NVML_NVLINK_ERROR_DL_RECOVERY};
      for (unsigned link = 0; link < kMaxNvLinks; ++link) {
        const int c = counters[id == HAL_FIELD_LINK_ERRORS ? 0 : 1];
        if (n.nvlink_errors(h, link, c, &ull) == NVML_SUCCESS) total += ull, any = true;
      }
      r = any ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
      v.u64 = total;
      break;
    }
    case HAL_FIELD_THROTTLE_REASONS:
      if (n.throttle && (r = n.throttle(h, &ull)) == NVML_SUCCESS) {
        uint64_t bits = 0;
        if (ull & (kSwThermal | kHwThermal)) bits |= HAL_THROTTLE_THERMAL;
        if (ull & (kSwPowerCap | kHwPowerBrake)) bits |= HAL_THROTTLE_POWER;
        if (ull & kHwSlowdown) bits |= HAL_THROTTLE_RELIABILITY;
        if (ull & ~(kSwThermal | kHwThermal | kSwPowerCap | kHwPowerBrake | kHwSlowdown | 0x1ull /* idle */))
          bits |= HAL_THROTTLE_OTHER;
        v.u64 = bits;
      }
      break;
    case HAL_FIELD_RETIRED_PAGES: {
      if (!n.retired) break;
      unsigned a = 0, b = 0;
      r = n.retired(h, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT, &a, nullptr);
      if (r == NVML_SUCCESS) r = n.retired(h, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT, &b, nullptr);
      v.u64 = static_cast<uint64_t>(a) + b;
      break;
    }
    default:
      break;
  }
  return r;
}

}  // namespace

void telemetry_open() {
  std::lock_guard lk(g_mu);
  if (g_nvml.lib) return;
  g_nvml.lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!g_nvml.lib) return;  // every field then reads NOT_SUPPORTED
  sym(g_nvml.init, "nvmlInit_v2");
  sym(g_nvml.shutdown, "nvmlShutdown");
  sym(g_nvml.by_index, "nvmlDeviceGetHandleByIndex_v2");
  sym(g_nvml.by_uuid, "nvmlDeviceGetHandleByUUID");
  sym(g_nvml.temperature, "nvmlDeviceGetTemperature");
  sym(g_nvml.power, "nvmlDeviceGetPowerUsage");
  sym(g_nvml.energy, "nvmlDeviceGetTotalEnergyConsumption");
  sym(g_nvml.clock, "nvmlDeviceGetClockInfo");
  sym(g_nvml.max_clock, "nvmlDeviceGetMaxClockInfo");
  sym(g_nvml.utilization, "nvmlDeviceGetUtilizationRates");
  sym(g_nvml.memory, "nvmlDeviceGetMemoryInfo");
  sym(g_nvml.ecc, "nvmlDeviceGetTotalEccErrors");
  sym(g_nvml.throttle, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!g_nvml.throttle) sym(g_nvml.throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");
  sym(g_nvml.nvlink_errors, "nvmlDeviceGetNvLinkErrorCounter");
  sym(g_nvml.retired, "nvmlDeviceGetRetiredPages");
  g_nvml.ok = g_nvml.init && g_nvml.init() == NVML_SUCCESS;
}

void telemetry_close() {
  std::lock_guard lk(g_mu);
  if (g_nvml.ok && g_nvml.shutdown) g_nvml.shutdown();
  if (g_nvml.lib) ::dlclose(g_nvml.lib);
  g_nvml = Nvml{};
}

double max_sm_clock_mhz(uint32_t device) {
  std::lock_guard lk(g_mu);
  nvmlDevice_t h = handle(device);
  unsigned mhz = 0;
  return h && g_nvml.max_clock && g_nvml.max_clock(h, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS ? mhz : 0.0;
}

hal_status_t list_fields(uint32_t device, hal_field_info_t* fields, uint32_t capacity, uint32_t* count) {
  if (count == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: count is NULL");
  if (hal_status_t st = use_device(device); st != HAL_OK) return st;
  const uint32_t n = sizeof(kFields) / sizeof(kFields[0]);
  *count = n;
  for (uint32_t i = 0; fields != nullptr && i < capacity && i < n; ++i) {
    hal_field_info_t f{};
    f.id = kFields[i].id;
    f.type = kFields[i].type;
    f.flags = kFields[i].flags;
    std::snprintf(f.name, sizeof f.name, "%s", kFields[i].name);
    std::snprintf(f.unit, sizeof f.unit, "%s", kFields[i].unit);
    fields[i] = f;
  }
  return HAL_OK;
}

hal_status_t read_fields(uint32_t device, const hal_field_id_t* ids, uint32_t n,
                         hal_telemetry_sample_t* samples) {
  if (n > 0 && (ids == nullptr || samples == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: ids or samples is NULL");
  if (hal_status_t st = use_device(device); st != HAL_OK) return st;
  std::lock_guard lk(g_mu);
  nvmlDevice_t h = handle(device);
  for (uint32_t i = 0; i < n; ++i) {
    hal_telemetry_sample_t& s = samples[i];
    s = hal_telemetry_sample_t{};
    s.id = ids[i];
    const FieldDef* def = nullptr;
    for (const auto& f : kFields)
      if (f.id == ids[i]) def = &f;
    if (def == nullptr) {
      s.status = HAL_ERR_NOT_SUPPORTED;  // not a field this plugin lists
      continue;
    }
    s.type = def->type;
    if (h == nullptr) {
      s.status = HAL_ERR_NOT_SUPPORTED;  // no NVML on this machine
      continue;
    }
    hal_value_t v{};
    const nvmlReturn_t r = read_one(h, ids[i], v);
    s.status = r == NVML_SUCCESS               ? HAL_OK
               : r == NVML_ERROR_NOT_SUPPORTED ? HAL_ERR_NOT_SUPPORTED
                                               : HAL_ERR_UNAVAILABLE;
    if (r == NVML_SUCCESS) {
      s.value = v;
      s.timestamp_ns = now_ns();
    }
  }
  return HAL_OK;
}

}  // namespace cuda_vendor
