// The cuda vendor: CUDA devices through the CUDA runtime, collectives on
// NCCL bootstrapped through the host's callbacks, telemetry from NVML loaded
// at run time. Exports hal_get_api_v1.
#include "cuda.hpp"
#include "presence.hpp"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>

namespace cuda_vendor {
namespace {

thread_local std::string t_error;
std::mutex g_mu;  // guards the state below
int g_refs = 0;
int g_count = 0;
// cudaMalloc gives 256-byte alignment; larger requests are over-allocated:
// aligned pointer -> (what cudaMalloc returned, device).
std::map<void*, std::pair<void*, uint32_t>> g_allocs;

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

hal_status_t cuda_fail(cudaError_t e, const std::string& what) {
  cudaGetLastError();  // clear a sticky launch error for the next call
  hal_status_t st = HAL_ERR_INTERNAL;
  if (e == cudaErrorMemoryAllocation)
    st = HAL_ERR_OUT_OF_MEMORY;
  else if (e == cudaErrorInvalidValue || e == cudaErrorInvalidDevicePointer || e == cudaErrorInvalidDevice)
    st = HAL_ERR_INVALID_ARGUMENT;
  else if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
    st = HAL_ERR_UNAVAILABLE;
  else if (e == cudaErrorECCUncorrectable || e == cudaErrorHardwareStackError ||
           e == cudaErrorIllegalInstruction || e == cudaErrorLaunchFailure || e == cudaErrorIllegalAddress ||
           e == cudaErrorDevicesUnavailable)
    st = HAL_ERR_DEVICE_LOST;
  return fail(st, "cuda: " + what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

hal_status_t use_device(uint32_t device) {
  {
    std::lock_guard lk(g_mu);
    if (g_refs == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: not initialised");
    if (device >= static_cast<uint32_t>(g_count))
      return fail(HAL_ERR_INVALID_ARGUMENT,
                  "cuda: no device " + std::to_string(device) + " (" + std::to_string(g_count) + " visible)");
  }
  if (cudaError_t e = cudaSetDevice(static_cast<int>(device)); e != cudaSuccess)
    return cuda_fail(e, "cudaSetDevice(" + std::to_string(device) + ")");
  return HAL_OK;
}

namespace {

hal_status_t init(const hal_init_args_t* args) {
  if (args == nullptr || args->struct_size < HAL_INIT_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: init args NULL or struct_size too small");
  if (args->options != nullptr && args->options[0] != '\0')
    return fail(HAL_ERR_INVALID_ARGUMENT,
                std::string("cuda: unknown options '") + args->options +
                    "' (this vendor takes none; CUDA_VISIBLE_DEVICES picks devices)");
  std::lock_guard lk(g_mu);
  if (g_refs == 0) {
    const sigma_cuda::GpuPresence gpu = sigma_cuda::probe_gpu();
    if (gpu.presence == sigma_cuda::Presence::none)
      return fail(HAL_ERR_UNAVAILABLE, "cuda: no usable GPU: " + gpu.why);
    // A GPU whose driver fails is a fault, not an absent device: callers
    // (and the conformance suite) must see it fail, not skip.
    if (gpu.presence == sigma_cuda::Presence::broken)
      return fail(HAL_ERR_INTERNAL, "cuda: a GPU driver is installed but CUDA cannot use it: " + gpu.why);
    const int n = gpu.count;
    g_count = n;
    telemetry_open();
  }
  ++g_refs;
  return HAL_OK;
}

hal_status_t finalize() {
  std::map<void*, std::pair<void*, uint32_t>> allocs;
  {
    std::lock_guard lk(g_mu);
    if (g_refs == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: finalize without init");
    if (--g_refs > 0) return HAL_OK;
    allocs.swap(g_allocs);
  }
  destroy_all_comms();
  for (auto& [aligned, raw] : allocs) {
    (void)aligned;
    cudaSetDevice(static_cast<int>(raw.second));
    cudaFree(raw.first);
  }
  telemetry_close();
  return HAL_OK;
}

const char* get_last_error() { return last_error(); }

hal_status_t get_count(uint32_t* count) {
  if (count == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: count is NULL");
  std::lock_guard lk(g_mu);
  *count = static_cast<uint32_t>(g_count);
  return HAL_OK;
}

// Dense FLOP per clock per SM for the architectures whose figures are
// published (A100: sm_80, H100/H200: sm_90); 0 elsewhere (unknown).
struct PerSm {
  double f32, f16, bf16, f64;
};
PerSm per_sm(int major, int minor) {
  if (major == 8 && minor == 0) return {128, 2048, 2048, 64};
  if (major == 9 && minor == 0) return {256, 4096, 4096, 128};
  return {0, 0, 0, 0};
}

hal_status_t get_props(uint32_t device, hal_device_props_t* p) {
  if (p == nullptr || p->struct_size < HAL_DEVICE_PROPS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: props NULL or struct_size too small");
  if (hal_status_t st = use_device(device); st != HAL_OK) return st;
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, static_cast<int>(device)); e != cudaSuccess)
    return cuda_fail(e, "cudaGetDeviceProperties");
  const uint64_t size = p->struct_size;
  std::memset(p, 0, sizeof(*p));
  p->struct_size = size;
  std::snprintf(p->name, sizeof(p->name), "%.63s", prop.name);  // truncated to the ABI's 64 bytes
  char* u = p->uuid;
  u += std::snprintf(u, 6, "GPU-");
  for (int i = 0; i < 16; ++i)
    u += std::snprintf(u, 3, "%02x", static_cast<unsigned char>(prop.uuid.bytes[i]));
  p->memory_kind = HAL_MEMORY_DEVICE;
  p->memory_bytes = prop.totalGlobalMem;
  p->alignment_bytes = 256;
  const double clock_hz = max_sm_clock_mhz(device) * 1e6;
  const PerSm f = per_sm(prop.major, prop.minor);
  const double sms = prop.multiProcessorCount;
  p->peak_flops[HAL_DTYPE_F32] = f.f32 * sms * clock_hz;
  p->peak_flops[HAL_DTYPE_F16] = f.f16 * sms * clock_hz;
  p->peak_flops[HAL_DTYPE_BF16] = f.bf16 * sms * clock_hz;
  p->peak_flops[HAL_DTYPE_F64] = f.f64 * sms * clock_hz;
  int bus_bits = 0, mem_khz = 0;
  if (cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, static_cast<int>(device)) ==
          cudaSuccess &&
      cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, static_cast<int>(device)) == cudaSuccess)
    p->peak_memory_bandwidth = 2.0 * mem_khz * 1e3 * bus_bits / 8;  // DDR: two transfers per clock
  cudaGetLastError();
  return HAL_OK;
}

hal_status_t mem_alloc(uint32_t device, uint64_t size, uint64_t alignment, void** ptr) {
  if (ptr == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: ptr is NULL");
  if (alignment != 0 && (alignment & (alignment - 1)) != 0)
    return fail(HAL_ERR_INVALID_ARGUMENT,
                "cuda: alignment " + std::to_string(alignment) + " is not a power of two");
  if (hal_status_t st = use_device(device); st != HAL_OK) return st;
  const uint64_t extra = alignment > 256 ? alignment : 0;
  void* raw = nullptr;
  if (cudaError_t e = cudaMalloc(&raw, std::max<uint64_t>(size + extra, 1)); e != cudaSuccess)
    return cuda_fail(e, "cudaMalloc(" + std::to_string(size) + " bytes)");
  auto addr = reinterpret_cast<uintptr_t>(raw);
  if (extra) addr = (addr + alignment - 1) & ~static_cast<uintptr_t>(alignment - 1);
  std::lock_guard lk(g_mu);
  g_allocs[reinterpret_cast<void*>(addr)] = {raw, device};
  *ptr = reinterpret_cast<void*>(addr);
  return HAL_OK;
}

hal_status_t mem_free(uint32_t device, void* ptr) {
  if (ptr == nullptr) return HAL_OK;
  void* raw = nullptr;
  {
    std::lock_guard lk(g_mu);
    auto it = g_allocs.find(ptr);
    if (it == g_allocs.end() || it->second.second != device)
      return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: pointer was not allocated by this plugin on that device");
    raw = it->second.first;
    g_allocs.erase(it);
  }
  if (hal_status_t st = use_device(device); st != HAL_OK) return st;
  if (cudaError_t e = cudaFree(raw); e != cudaSuccess) return cuda_fail(e, "cudaFree");
  return HAL_OK;
}

hal_status_t copy(uint32_t device, void* dst, const void* src, uint64_t size, hal_copy_kind_t kind,
                  hal_stream_t stream) {
  if (kind > HAL_COPY_DEVICE_TO_DEVICE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: unknown copy kind " + std::to_string(kind));
  if (size > 0 && (dst == nullptr || src == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: NULL buffer in memcpy");
  if (hal_status_t st = use_device(device); st != HAL_OK) return st;
  if (size == 0) return HAL_OK;
  static const cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                         cudaMemcpyDeviceToDevice};
  // Without a stream the copy must be done on return. A plain cudaMemcpy
  // from pageable memory returns once the bytes are staged, before the DMA
  // lands, and our streams do not wait for the legacy stream: a collective
  // posted next could read the old bytes (seen on an H200). So this thread's
  // own stream, then a wait for it.
  cudaStream_t s = stream ? stream->stream : cudaStreamPerThread;
  cudaError_t e = cudaMemcpyAsync(dst, src, size, kinds[kind], s);
  if (e == cudaSuccess && stream == nullptr) e = cudaStreamSynchronize(s);
  return e == cudaSuccess ? HAL_OK : cuda_fail(e, "cudaMemcpy");
}

hal_status_t stream_create(uint32_t device, hal_stream_t* stream) {
  if (stream == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: stream is NULL");
  if (hal_status_t st = use_device(device); st != HAL_OK) return st;
  cudaStream_t s = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess)
    return cuda_fail(e, "cudaStreamCreateWithFlags");
  *stream = new hal_stream_s{device, s};
  return HAL_OK;
}

hal_status_t stream_synchronize(hal_stream_t stream) {
  if (stream == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: stream is NULL");
  if (hal_status_t st = use_device(stream->device); st != HAL_OK) return st;
  const cudaError_t e = cudaStreamSynchronize(stream->stream);
  return e == cudaSuccess ? HAL_OK : cuda_fail(e, "cudaStreamSynchronize");
}

hal_status_t stream_destroy(hal_stream_t stream) {
  if (stream == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: stream is NULL");
  if (hal_status_t st = use_device(stream->device); st != HAL_OK) return st;
  cudaStreamSynchronize(stream->stream);
  const cudaError_t e = cudaStreamDestroy(stream->stream);
  delete stream;
  return e == cudaSuccess ? HAL_OK : cuda_fail(e, "cudaStreamDestroy");
}

const hal_device_api_t k_device = {
    .struct_size = sizeof(hal_device_api_t),
    .get_count = get_count,
    .get_props = get_props,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .memcpy = copy,
    .stream_create = stream_create,
    .stream_synchronize = stream_synchronize,
    .stream_destroy = stream_destroy,
    .self_test = self_test,
};

const hal_telemetry_api_t k_telemetry = {
    .struct_size = sizeof(hal_telemetry_api_t),
    .list_fields = list_fields,
    .read = read_fields,
};

const hal_api_t k_api = {
    .struct_size = sizeof(hal_api_t),
    .abi_major = HAL_ABI_MAJOR,
    .abi_minor = HAL_ABI_MINOR,
    .name = "cuda",
    .version = "0.1.0",
    .capabilities = HAL_CAP_MULTI_RANK | HAL_CAP_STREAMS | HAL_CAP_KERNELS,
    .extensions = &k_kernels.header,
    .init = init,
    .finalize = finalize,
    .get_last_error = get_last_error,
    .device = &k_device,
    .telemetry = &k_telemetry,
    .coll = &k_coll,
};

}  // namespace
}  // namespace cuda_vendor

extern "C" HAL_EXPORT const hal_api_t* hal_get_api_v1(uint32_t host_major, uint32_t host_minor) {
  (void)host_minor;
  return host_major == HAL_ABI_MAJOR ? &cuda_vendor::k_api : nullptr;
}
