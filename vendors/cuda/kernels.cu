// The cuda vendor's HAL_EXT_KERNELS: the device versions of libsigma's
// kernels (sigma/kernels.hpp), on buffers in the GPU's memory. Each entry
// runs synchronously on the calling thread's default stream (built with
// --default-stream per-thread). Reductions write one partial per block and
// the host adds them in block order, so results do not depend on timing.
#include "cuda.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace cuda_vendor {
namespace {

// A failed CUDA call inside an entry: becomes the entry's status.
struct Failed {
  hal_status_t status;
};

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Failed{cuda_fail(e, std::string("kernels: ") + what)};
}

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

int blocks_for(uint64_t n) {
  return static_cast<int>(std::clamp<uint64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// Device memory the host reads back, freed on scope exit. Stream-ordered
// (cudaMallocAsync): a plain cudaFree would wait for the whole device, a
// collective hung on another stream included.
template <typename T>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(size_t n) {
    check(cudaMallocAsync(reinterpret_cast<void**>(&p), n * sizeof(T), cudaStreamPerThread),
          "cudaMallocAsync");
  }
  ~DeviceArray() { cudaFreeAsync(p, cudaStreamPerThread); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> to_host(size_t n) const {
    std::vector<T> h(n);
    check(cudaMemcpyAsync(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, cudaStreamPerThread),
          "cudaMemcpyAsync");
    check(cudaStreamSynchronize(cudaStreamPerThread), "cudaStreamSynchronize");
    return h;
  }
};

void finish(const char* what) {
  check(cudaGetLastError(), what);
  check(cudaStreamSynchronize(cudaStreamPerThread), what);
}

template <int kDt>
__device__ float load(const uint8_t* p, uint64_t i) {
  if constexpr (kDt == HAL_DTYPE_F32)
    return reinterpret_cast<const float*>(p)[i];
  else if constexpr (kDt == HAL_DTYPE_F16)
    return __half2float(reinterpret_cast<const __half*>(p)[i]);
  else
    return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
}

template <int kDt>
__device__ void store(uint8_t* p, uint64_t i, float v) {
  if constexpr (kDt == HAL_DTYPE_F32)
    reinterpret_cast<float*>(p)[i] = v;
  else if constexpr (kDt == HAL_DTYPE_F16)
    reinterpret_cast<__half*>(p)[i] = __float2half_rn(v);
  else
    reinterpret_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

struct Partial {
  unsigned long long bad;
  double ssq;
  float amax;
};

// The split of a buffer into 16-byte vectors: `head` elements before the
// first aligned vector, `vecs` vectors, then the rest. A start that is not
// a whole element off alignment has no vectors at all.
struct Split {
  uint64_t head;
  uint64_t vecs;
};

Split split(const void* p, uint64_t n, uint32_t es) {
  const auto off = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) % 16);
  if (off % es != 0) return {n, 0};
  const uint64_t head = std::min<uint64_t>(n, ((16 - off) % 16) / es);
  return {head, (n - head) / (16 / es)};
}

struct ScanAcc {
  unsigned long long bad = 0;
  double ssq = 0;
  float amax = 0;
  __device__ void add(float v) {
    const bool ok = isfinite(v);
    const float a = ok ? v : 0.0f;
    bad += ok ? 0 : 1;
    ssq += static_cast<double>(a) * a;
    amax = fmaxf(amax, fabsf(a));
  }
};

template <int kDt>
__device__ void scan_vec(const uint4& w, ScanAcc& acc) {
  if constexpr (kDt == HAL_DTYPE_F32) {
    const float* f = reinterpret_cast<const float*>(&w);
#pragma unroll
    for (int k = 0; k < 4; ++k) acc.add(f[k]);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) acc.add(load<kDt>(reinterpret_cast<const uint8_t*>(&w), k));
  }
}

// Each thread reads 16-byte vectors, four in flight at a time, so the
// memory system sees enough requests to run at its rate.
template <int kDt>
__global__ void scan_kernel(const uint8_t* data, uint64_t n, Split sp, Partial* out) {
  constexpr uint32_t kEs = kDt == HAL_DTYPE_F32 ? 4 : 2;
  constexpr uint64_t kPer = 16 / kEs;
  const uint64_t gid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  ScanAcc acc;
  for (uint64_t i = gid; i < sp.head; i += stride) acc.add(load<kDt>(data, i));
  const auto* v = reinterpret_cast<const uint4*>(data + sp.head * kEs);
  uint64_t j = gid;
  for (; j + 3 * stride < sp.vecs; j += 4 * stride) {
    const uint4 a = __ldcs(v + j), b = __ldcs(v + j + stride), c = __ldcs(v + j + 2 * stride),
                d = __ldcs(v + j + 3 * stride);
    scan_vec<kDt>(a, acc);
    scan_vec<kDt>(b, acc);
    scan_vec<kDt>(c, acc);
    scan_vec<kDt>(d, acc);
  }
  for (; j < sp.vecs; j += stride) scan_vec<kDt>(__ldcs(v + j), acc);
  for (uint64_t i = sp.head + sp.vecs * kPer + gid; i < n; i += stride) acc.add(load<kDt>(data, i));
  unsigned long long bad = acc.bad;
  double s = acc.ssq;
  float m = acc.amax;
  __shared__ Partial warp[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    bad += __shfl_down_sync(0xFFFFFFFFu, bad, o);
    s += __shfl_down_sync(0xFFFFFFFFu, s, o);
    m = fmaxf(m, __shfl_down_sync(0xFFFFFFFFu, m, o));
  }
  if (threadIdx.x % 32 == 0) warp[threadIdx.x / 32] = {bad, s, m};
  __syncthreads();
  if (threadIdx.x == 0) {
    Partial p{0, 0, 0};
    for (int w = 0; w < kThreads / 32; ++w) {
      p.bad += warp[w].bad;
      p.ssq += warp[w].ssq;
      p.amax = fmaxf(p.amax, warp[w].amax);
    }
    out[blockIdx.x] = p;
  }
}

__global__ void shuffle_kernel(const uint8_t* src, const uint8_t* base, uint8_t* dst, uint64_t n, uint32_t es,
                               bool inverse) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    for (uint32_t b = 0; b < es; ++b) {
      const uint8_t x = base ? base[i * es + b] : 0;
      if (inverse)
        dst[i * es + b] = src[b * n + i] ^ x;
      else
        dst[b * n + i] = src[i * es + b] ^ x;
    }
  }
}

__device__ uint64_t word_at(const uint8_t* p, uint64_t i, uint64_t bytes) {
  if (i * 8 + 8 <= bytes && (reinterpret_cast<uintptr_t>(p) & 7) == 0)
    return reinterpret_cast<const uint64_t*>(p)[i];
  uint64_t w = 0;
  for (uint64_t b = 0; b < 8 && i * 8 + b < bytes; ++b) w |= static_cast<uint64_t>(p[i * 8 + b]) << (8 * b);
  return w;
}

__device__ unsigned long long word_term(uint64_t w, uint64_t i) { return hal_h64_word(w, i); }

// Word i is bytes 8i..8i+7 of the buffer. Where the buffer starts on a
// whole word, the words between its first 16-byte boundary and the last
// whole pair are read as 16-byte vectors, four in flight per thread; the
// head, the tail and any other start read word by word.
__global__ void checksum_kernel(const uint8_t* p, uint64_t bytes, Split sp, unsigned long long* out) {
  const uint64_t words = (bytes + 7) / 8;
  const uint64_t gid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long s = 0;
  for (uint64_t i = gid; i < sp.head; i += stride) s += word_term(word_at(p, i, bytes), i);
  const auto* v = reinterpret_cast<const ulonglong2*>(p + sp.head * 8);
  uint64_t j = gid;
  for (; j + 3 * stride < sp.vecs; j += 4 * stride) {
    ulonglong2 w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = __ldcs(v + j + k * stride);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint64_t i = sp.head + 2 * (j + k * stride);
      s += word_term(w[k].x, i) + word_term(w[k].y, i + 1);
    }
  }
  for (; j < sp.vecs; j += stride) {
    const ulonglong2 w = __ldcs(v + j);
    const uint64_t i = sp.head + 2 * j;
    s += word_term(w.x, i) + word_term(w.y, i + 1);
  }
  for (uint64_t i = sp.head + 2 * sp.vecs + gid; i < words; i += stride)
    s += word_term(word_at(p, i, bytes), i);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xFFFFFFFFu, s, o);
  __shared__ unsigned long long warp[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long t = 0;
    for (int w = 0; w < kThreads / 32; ++w) t += warp[w];
    out[blockIdx.x] = t;
  }
}

// One block per choice: its row of `row_bytes` copied 4 bytes at a time
// when the rows allow, else byte by byte.
__global__ void permute_kernel(const uint8_t* src, uint8_t* dst, uint64_t row_bytes, const int64_t* row_of,
                               uint32_t top_k) {
  const uint64_t choice = blockIdx.x;
  const int64_t r = row_of[choice];
  if (r < 0) return;
  const uint8_t* from = src + (choice / top_k) * row_bytes;
  uint8_t* to = dst + static_cast<uint64_t>(r) * row_bytes;
  if (row_bytes % 4 == 0 && (reinterpret_cast<uintptr_t>(from) & 3) == 0 &&
      (reinterpret_cast<uintptr_t>(to) & 3) == 0) {
    for (uint64_t j = threadIdx.x; j < row_bytes / 4; j += blockDim.x)
      reinterpret_cast<uint32_t*>(to)[j] = reinterpret_cast<const uint32_t*>(from)[j];
  } else {
    for (uint64_t j = threadIdx.x; j < row_bytes; j += blockDim.x) to[j] = from[j];
  }
}

// One block per token: out[t][j] = sum_k w * expert_out[row][j] in f32.
template <int kDt>
__global__ void unpermute_kernel(const uint8_t* src, const int64_t* row_of, const float* weights,
                                 uint32_t top_k, uint64_t hidden, uint8_t* out) {
  const uint64_t t = blockIdx.x;
  for (uint64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    float acc = 0;
    for (uint32_t c = 0; c < top_k; ++c) {
      const int64_t r = row_of[t * top_k + c];
      if (r >= 0) acc += weights[t * top_k + c] * load<kDt>(src, static_cast<uint64_t>(r) * hidden + j);
    }
    store<kDt>(out, t * hidden + j, acc);
  }
}

// Runs `body` on `device`, turning a failed CUDA call into the status.
template <typename F>
hal_status_t on(uint32_t device, F&& body) {
  if (hal_status_t st = use_device(device); st != HAL_OK) return st;
  try {
    body();
    return HAL_OK;
  } catch (const Failed& f) {
    return f.status;
  }
}

hal_status_t grad_scan(uint32_t device, const void* data, uint64_t count, hal_dtype_t dtype,
                       hal_kernel_scan_result_t* out) {
  if (out == nullptr || (count > 0 && data == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: grad_scan: NULL data or result");
  if (dtype != HAL_DTYPE_F32 && dtype != HAL_DTYPE_F16 && dtype != HAL_DTYPE_BF16)
    return fail(HAL_ERR_INVALID_ARGUMENT,
                "cuda: grad_scan: dtype " + std::to_string(dtype) + " is not f32, f16 or bf16");
  *out = hal_kernel_scan_result_t{0, 0, 0};
  if (count == 0) return HAL_OK;
  return on(device, [&] {
    const uint32_t es = dtype == HAL_DTYPE_F32 ? 4 : 2;
    const Split sp = split(data, count, es);
    const int blocks = blocks_for(sp.vecs > 0 ? sp.vecs : count);
    DeviceArray<Partial> part(blocks);
    const auto* p = static_cast<const uint8_t*>(data);
    if (dtype == HAL_DTYPE_F32)
      scan_kernel<HAL_DTYPE_F32><<<blocks, kThreads, 0, cudaStreamPerThread>>>(p, count, sp, part.p);
    else if (dtype == HAL_DTYPE_F16)
      scan_kernel<HAL_DTYPE_F16><<<blocks, kThreads, 0, cudaStreamPerThread>>>(p, count, sp, part.p);
    else
      scan_kernel<HAL_DTYPE_BF16><<<blocks, kThreads, 0, cudaStreamPerThread>>>(p, count, sp, part.p);
    finish("grad_scan");
    for (const Partial& q : part.to_host(blocks)) {
      out->non_finite += q.bad;
      out->sum_squares += q.ssq;
      out->amax = std::max(out->amax, static_cast<double>(q.amax));
    }
  });
}

hal_status_t shuffle(uint32_t device, const void* src, const void* base, void* dst, uint64_t count,
                     uint32_t elem_size, uint32_t inverse) {
  if (count > 0 && (src == nullptr || dst == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: shuffle: NULL buffer");
  if (count == 0 || elem_size == 0) return HAL_OK;
  return on(device, [&] {
    shuffle_kernel<<<blocks_for(count), kThreads, 0, cudaStreamPerThread>>>(
        static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(base), static_cast<uint8_t*>(dst),
        count, elem_size, inverse != 0);
    finish(inverse ? "unshuffle" : "shuffle");
  });
}

hal_status_t checksum(uint32_t device, const void* data, uint64_t bytes, uint64_t* out) {
  if (out == nullptr || (bytes > 0 && data == nullptr))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: checksum: NULL data or result");
  uint64_t sum = 0;
  const hal_status_t st = bytes == 0 ? HAL_OK : on(device, [&] {
    // Whole 16-byte pairs of words only: the last, partial word is the tail's.
    Split sp = split(data, bytes / 8, 8);
    if (reinterpret_cast<uintptr_t>(data) % 8 != 0) sp = {0, 0};
    const int blocks = blocks_for(sp.vecs > 0 ? sp.vecs : (bytes + 7) / 8);
    DeviceArray<unsigned long long> part(blocks);
    checksum_kernel<<<blocks, kThreads, 0, cudaStreamPerThread>>>(static_cast<const uint8_t*>(data), bytes,
                                                                  sp, part.p);
    finish("checksum");
    for (unsigned long long q : part.to_host(blocks)) sum += q;
  });
  if (st == HAL_OK) *out = hal_h64_finish(sum, bytes);
  return st;
}

hal_status_t moe_permute(uint32_t device, const void* tokens, uint64_t num_tokens, uint64_t row_bytes,
                         const int64_t* row_of, uint32_t top_k, void* out) {
  const uint64_t choices = num_tokens * top_k;
  if (choices == 0 || row_bytes == 0) return HAL_OK;
  if (choices > 0x7FFFFFFFull)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: moe_permute: more than 2^31 choices");
  return on(device, [&] {
    permute_kernel<<<static_cast<unsigned>(choices), kThreads, 0, cudaStreamPerThread>>>(
        static_cast<const uint8_t*>(tokens), static_cast<uint8_t*>(out), row_bytes, row_of, top_k);
    finish("moe_permute");
  });
}

hal_status_t moe_unpermute(uint32_t device, const void* expert_out, const int64_t* row_of,
                           const float* weights, uint64_t num_tokens, uint32_t top_k, uint64_t hidden,
                           hal_dtype_t dtype, void* out) {
  if (num_tokens == 0 || hidden == 0) return HAL_OK;
  if (num_tokens > 0x7FFFFFFFull)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: moe_unpermute: more than 2^31 tokens");
  if (dtype != HAL_DTYPE_F32 && dtype != HAL_DTYPE_F16 && dtype != HAL_DTYPE_BF16)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: moe_unpermute: dtype is not f32, f16 or bf16");
  return on(device, [&] {
    const auto* s = static_cast<const uint8_t*>(expert_out);
    auto* o = static_cast<uint8_t*>(out);
    const auto blocks = static_cast<unsigned>(num_tokens);
    if (dtype == HAL_DTYPE_F32)
      unpermute_kernel<HAL_DTYPE_F32>
          <<<blocks, kThreads, 0, cudaStreamPerThread>>>(s, row_of, weights, top_k, hidden, o);
    else if (dtype == HAL_DTYPE_F16)
      unpermute_kernel<HAL_DTYPE_F16>
          <<<blocks, kThreads, 0, cudaStreamPerThread>>>(s, row_of, weights, top_k, hidden, o);
    else
      unpermute_kernel<HAL_DTYPE_BF16>
          <<<blocks, kThreads, 0, cudaStreamPerThread>>>(s, row_of, weights, top_k, hidden, o);
    finish("moe_unpermute");
  });
}

// The entries (ABI 1.3): each args struct checked, then the work above.
hal_status_t bad_args(const char* who) {
  return fail(HAL_ERR_INVALID_ARGUMENT,
              std::string("cuda: ") + who + ": args NULL or smaller than ABI 1.3's");
}

hal_status_t grad_scan_entry(const hal_kernel_grad_scan_args_t* a) {
  if (a == nullptr || a->struct_size < HAL_KERNEL_GRAD_SCAN_ARGS_V1_3_SIZE) return bad_args("grad_scan");
  return grad_scan(a->device, a->data, a->count, a->dtype, a->out);
}

hal_status_t shuffle_entry(const hal_kernel_shuffle_args_t* a) {
  if (a == nullptr || a->struct_size < HAL_KERNEL_SHUFFLE_ARGS_V1_3_SIZE) return bad_args("shuffle");
  return shuffle(a->device, a->src, a->base, a->dst, a->count, a->elem_size, a->inverse);
}

hal_status_t checksum_entry(const hal_kernel_checksum_args_t* a) {
  if (a == nullptr || a->struct_size < HAL_KERNEL_CHECKSUM_ARGS_V1_3_SIZE) return bad_args("checksum");
  return checksum(a->device, a->data, a->bytes, a->out);
}

hal_status_t moe_permute_entry(const hal_kernel_moe_permute_args_t* a) {
  if (a == nullptr || a->struct_size < HAL_KERNEL_MOE_PERMUTE_ARGS_V1_3_SIZE) return bad_args("moe_permute");
  return moe_permute(a->device, a->tokens, a->num_tokens, a->row_bytes, a->row_of, a->top_k, a->out);
}

hal_status_t moe_unpermute_entry(const hal_kernel_moe_unpermute_args_t* a) {
  if (a == nullptr || a->struct_size < HAL_KERNEL_MOE_UNPERMUTE_ARGS_V1_3_SIZE)
    return bad_args("moe_unpermute");
  return moe_unpermute(a->device, a->expert_out, a->row_of, a->weights, a->num_tokens, a->top_k, a->hidden,
                       a->dtype, a->out);
}

}  // namespace

const hal_ext_kernels_t k_kernels = {
    .header = {sizeof(hal_ext_kernels_t), HAL_EXT_KERNELS, 0, nullptr},
    .grad_scan = grad_scan_entry,
    .shuffle = shuffle_entry,
    .checksum = checksum_entry,
    .moe_permute = moe_permute_entry,
    .moe_unpermute = moe_unpermute_entry,
};

}  // namespace cuda_vendor
