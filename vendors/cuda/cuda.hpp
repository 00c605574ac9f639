// The cuda vendor's shared pieces: the per-thread error message, CUDA
// status checks that quote the CUDA error, and the handle types.
#pragma once

#include <sigma/hal_support.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

struct hal_stream_s {
  uint32_t device;
  cudaStream_t stream;
};

namespace cuda_vendor {

// Sets the calling thread's message; returns status.
hal_status_t fail(hal_status_t status, std::string message);
const char* last_error();
uint64_t now_ns();

// "cuda: <what>: cudaErrorX: text" with the status a host can act on.
hal_status_t cuda_fail(cudaError_t e, const std::string& what);
// Makes `device` current on this thread; INVALID_ARGUMENT past the count.
hal_status_t use_device(uint32_t device);

// Telemetry (nvml.cpp): NVML loaded with dlopen, never linked.
void telemetry_open();
void telemetry_close();
hal_status_t list_fields(uint32_t device, hal_field_info_t* fields, uint32_t capacity, uint32_t* count);
hal_status_t read_fields(uint32_t device, const hal_field_id_t* ids, uint32_t n,
                         hal_telemetry_sample_t* samples);
// The device's maximum SM clock in MHz from NVML, 0 when unknown.
double max_sm_clock_mhz(uint32_t device);

// Collectives (comm.cpp).
extern const hal_coll_api_t k_coll;
void destroy_all_comms();

// Device kernels (kernels.cu), chained as HAL_EXT_KERNELS.
extern const hal_ext_kernels_t k_kernels;

// Self-test (self_test.cu).
hal_status_t self_test(uint32_t device, uint64_t budget_bytes, hal_self_test_result_t* result);

}  // namespace cuda_vendor
