/*
 * sigma/abi/hal_1_2.h -- HAL ABI 1.2, frozen: the declarations of
 * sigma/hal.h as version 1.2 released them (from the 1.2 header before its sizes became literals
 * (2026-12-07)), comments left out (sigma/hal.h states the contract). Never edited: a plugin built from this
 * header must keep loading into every later 1.x host, and tests/hal builds one from it to prove that. The
 * literal sizes at the end are the version's layout; the build fails if a declaration above moved.
 *
 * Include it instead of sigma/hal.h (it takes sigma/hal.h's include guard,
 * so the two cannot be mixed in one file).
 */
#ifndef SIGMA_HAL_H_
#define SIGMA_HAL_H_
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#define HAL_ABI_MAJOR 1
#define HAL_ABI_MINOR 2
#define HAL_GET_API_V1_SYMBOL "hal_get_api_v1"
#if defined(_WIN32)
#define HAL_EXPORT __declspec(dllexport)
#else
#define HAL_EXPORT __attribute__((visibility("default")))
#endif
#if defined(__cplusplus)
#define HAL_STATIC_ASSERT(cond, name) static_assert(cond, #name)
#else
#define HAL_STATIC_ASSERT(cond, name) typedef char hal_static_assert_##name[(cond) ? 1 : -1]
#endif
#define HAL_HAS_FIELD(ptr, type, field) \
  ((ptr) != NULL && (uint64_t)(offsetof(type, field) + sizeof(((type*)0)->field)) <= (ptr)->struct_size)
typedef int32_t hal_status_t;
enum hal_status_e {
  HAL_OK = 0,
  HAL_IN_PROGRESS = 1,
  HAL_ERR_INVALID_ARGUMENT = -1,
  HAL_ERR_NOT_SUPPORTED = -2,
  HAL_ERR_UNAVAILABLE = -3,
  HAL_ERR_DEVICE_LOST = -4,
  HAL_ERR_TIMEOUT = -5,
  HAL_ERR_ABORTED = -6,
  HAL_ERR_REMOTE_ERROR = -7,
  HAL_ERR_OUT_OF_MEMORY = -8,
  HAL_ERR_INTERNAL = -9
};
#define HAL_ERR_MIN_V1 (-9)
typedef uint32_t hal_dtype_t;
enum hal_dtype_e {
  HAL_DTYPE_F32 = 0,
  HAL_DTYPE_F16 = 1,
  HAL_DTYPE_BF16 = 2,
  HAL_DTYPE_F64 = 3,
  HAL_DTYPE_I32 = 4,
  HAL_DTYPE_I64 = 5,
  HAL_DTYPE_U8 = 6,
  HAL_DTYPE_COUNT_V1 = 7
};
#define HAL_DTYPE_SLOTS 16
typedef uint32_t hal_reduce_op_t;
enum hal_reduce_op_e {
  HAL_REDUCE_SUM = 0,
  HAL_REDUCE_PROD = 1,
  HAL_REDUCE_MIN = 2,
  HAL_REDUCE_MAX = 3,
  HAL_REDUCE_AVG = 4,
  HAL_REDUCE_COUNT_V1 = 5
};
typedef uint32_t hal_coll_op_t;
enum hal_coll_op_e {
  HAL_COLL_ALL_REDUCE = 0,
  HAL_COLL_ALL_GATHER = 1,
  HAL_COLL_REDUCE_SCATTER = 2,
  HAL_COLL_ALL_TO_ALL = 3,
  HAL_COLL_ALL_TO_ALLV = 4,
  HAL_COLL_BROADCAST = 5,
  HAL_COLL_BARRIER = 6,
  HAL_COLL_SEND = 7,
  HAL_COLL_RECV = 8,
  HAL_COLL_OP_COUNT_V1 = 9
};
typedef struct hal_stream_s* hal_stream_t;
typedef struct hal_comm_s* hal_comm_t;
typedef struct hal_request_s* hal_request_t;
typedef uint32_t hal_ext_type_t;
enum hal_ext_type_e { HAL_EXT_FAULT_INJECTION = 1, HAL_EXT_KERNELS = 2 };
typedef struct hal_ext_header_t {
  uint64_t struct_size;
  hal_ext_type_t type;
  uint32_t reserved;
  const struct hal_ext_header_t* next;
} hal_ext_header_t;
typedef struct hal_init_args_t {
  uint64_t struct_size;
  const char* options;
  const char* job_dir;
} hal_init_args_t;
typedef hal_status_t hal_init_fn(const hal_init_args_t* args);
typedef hal_status_t hal_finalize_fn(void);
typedef const char* hal_get_last_error_fn(void);
typedef uint32_t hal_memory_kind_t;
enum hal_memory_kind_e { HAL_MEMORY_HOST = 0, HAL_MEMORY_DEVICE = 1 };
typedef struct hal_device_props_t {
  uint64_t struct_size;
  char name[64];
  char uuid[40];
  hal_memory_kind_t memory_kind;
  uint32_t reserved0;
  uint64_t memory_bytes;
  uint64_t alignment_bytes;
  double peak_flops[HAL_DTYPE_SLOTS];
  double peak_memory_bandwidth;
} hal_device_props_t;
typedef uint32_t hal_copy_kind_t;
enum hal_copy_kind_e {
  HAL_COPY_HOST_TO_DEVICE = 0,
  HAL_COPY_DEVICE_TO_HOST = 1,
  HAL_COPY_DEVICE_TO_DEVICE = 2
};
typedef struct hal_self_test_result_t {
  uint64_t struct_size;
  uint32_t passed;
  uint32_t reserved0;
  double gemm_max_rel_error;
  uint64_t memory_pattern_errors;
  uint64_t memory_bytes_tested;
  double copy_bandwidth;
  double duration_s;
  char message[256];
} hal_self_test_result_t;
typedef hal_status_t hal_device_get_count_fn(uint32_t* count);
typedef hal_status_t hal_device_get_props_fn(uint32_t device, hal_device_props_t* props);
typedef hal_status_t hal_mem_alloc_fn(uint32_t device, uint64_t size_bytes, uint64_t alignment_bytes,
                                      void** ptr);
typedef hal_status_t hal_mem_free_fn(uint32_t device, void* ptr);
typedef hal_status_t hal_memcpy_fn(uint32_t device, void* dst, const void* src, uint64_t size_bytes,
                                   hal_copy_kind_t kind, hal_stream_t stream);
typedef hal_status_t hal_stream_create_fn(uint32_t device, hal_stream_t* stream);
typedef hal_status_t hal_stream_synchronize_fn(hal_stream_t stream);
typedef hal_status_t hal_stream_destroy_fn(hal_stream_t stream);
typedef hal_status_t hal_device_self_test_fn(uint32_t device, uint64_t budget_bytes,
                                             hal_self_test_result_t* result);
typedef struct hal_device_api_t {
  uint64_t struct_size;
  hal_device_get_count_fn* get_count;
  hal_device_get_props_fn* get_props;
  hal_mem_alloc_fn* mem_alloc;
  hal_mem_free_fn* mem_free;
  hal_memcpy_fn* memcpy;
  hal_stream_create_fn* stream_create;
  hal_stream_synchronize_fn* stream_synchronize;
  hal_stream_destroy_fn* stream_destroy;
  hal_device_self_test_fn* self_test;
} hal_device_api_t;
typedef uint32_t hal_field_id_t;
enum hal_field_id_e {
  HAL_FIELD_TEMPERATURE_C = 1,
  HAL_FIELD_POWER_W = 2,
  HAL_FIELD_ENERGY_J = 3,
  HAL_FIELD_CLOCK_COMPUTE_MHZ = 4,
  HAL_FIELD_CLOCK_MEMORY_MHZ = 5,
  HAL_FIELD_UTILIZATION_PCT = 6,
  HAL_FIELD_MEMORY_USED_BYTES = 7,
  HAL_FIELD_MEMORY_TOTAL_BYTES = 8,
  HAL_FIELD_ECC_CORRECTABLE = 9,
  HAL_FIELD_ECC_UNCORRECTABLE = 10,
  HAL_FIELD_LINK_ERRORS = 11,
  HAL_FIELD_LINK_RETRIES = 12,
  HAL_FIELD_THROTTLE_REASONS = 13,
  HAL_FIELD_FATAL_CODE = 14,
  HAL_FIELD_RETIRED_PAGES = 15,
  HAL_FIELD_STANDARD_COUNT_V1 = 16
};
#define HAL_FIELD_VENDOR_FIRST 0x80000000u
#define HAL_THROTTLE_THERMAL (UINT64_C(1) << 0)
#define HAL_THROTTLE_POWER (UINT64_C(1) << 1)
#define HAL_THROTTLE_RELIABILITY (UINT64_C(1) << 2)
#define HAL_THROTTLE_OTHER (UINT64_C(1) << 63)
typedef uint32_t hal_value_type_t;
enum hal_value_type_e { HAL_VALUE_F64 = 0, HAL_VALUE_I64 = 1, HAL_VALUE_U64 = 2 };
#define HAL_FIELD_FLAG_MONOTONIC (1u << 0)
typedef struct hal_field_info_t {
  hal_field_id_t id;
  hal_value_type_t type;
  uint32_t flags;
  uint32_t reserved;
  char name[48];
  char unit[16];
} hal_field_info_t;
typedef union hal_value_t {
  double f64;
  int64_t i64;
  uint64_t u64;
} hal_value_t;
#define HAL_MAX_TELEMETRY_FIELDS 4096u
typedef struct hal_telemetry_sample_t {
  hal_field_id_t id;
  hal_status_t status;
  uint64_t timestamp_ns;
  hal_value_type_t type;
  uint32_t reserved;
  hal_value_t value;
} hal_telemetry_sample_t;
typedef hal_status_t hal_telemetry_list_fields_fn(uint32_t device, hal_field_info_t* fields,
                                                  uint32_t capacity, uint32_t* count);
typedef hal_status_t hal_telemetry_read_fn(uint32_t device, const hal_field_id_t* ids, uint32_t n,
                                           hal_telemetry_sample_t* samples);
typedef struct hal_telemetry_api_t {
  uint64_t struct_size;
  hal_telemetry_list_fields_fn* list_fields;
  hal_telemetry_read_fn* read;
} hal_telemetry_api_t;
enum hal_bootstrap_limits_e { HAL_BOOTSTRAP_MAX_KEY_BYTES = 1024, HAL_BOOTSTRAP_MAX_VALUE_BYTES = 1048576 };
typedef struct hal_bootstrap_t {
  uint64_t struct_size;
  void* ctx;
  hal_status_t (*kv_set)(void* ctx, const char* key, const void* value, uint64_t size);
  hal_status_t (*kv_get)(void* ctx, const char* key, void* value, uint64_t capacity, uint64_t* size,
                         uint64_t timeout_ns);
  const char* store_uri;
  const char* key_prefix;
} hal_bootstrap_t;
typedef struct hal_comm_create_args_t {
  uint64_t struct_size;
  uint32_t device;
  uint32_t rank;
  uint32_t world_size;
  uint32_t reserved0;
  const hal_bootstrap_t* bootstrap;
  uint64_t timeout_ns;
} hal_comm_create_args_t;
typedef struct hal_coll_args_t {
  uint64_t struct_size;
  hal_coll_op_t op;
  hal_dtype_t dtype;
  hal_reduce_op_t reduce_op;
  uint32_t root;
  uint32_t peer;
  uint32_t reserved0;
  uint64_t count;
  const void* sendbuf;
  void* recvbuf;
  const uint64_t* send_counts;
  const uint64_t* send_displs;
  const uint64_t* recv_counts;
  const uint64_t* recv_displs;
} hal_coll_args_t;
typedef hal_status_t hal_coll_comm_create_fn(const hal_comm_create_args_t* args, hal_comm_t* comm);
typedef hal_status_t hal_coll_comm_destroy_fn(hal_comm_t comm);
typedef hal_status_t hal_coll_comm_abort_fn(hal_comm_t comm);
typedef hal_status_t hal_coll_comm_get_async_error_fn(hal_comm_t comm, hal_status_t* error);
typedef hal_status_t hal_coll_post_fn(hal_comm_t comm, const hal_coll_args_t* args, hal_stream_t stream,
                                      hal_request_t* request);
typedef hal_status_t hal_coll_test_fn(hal_request_t request);
typedef hal_status_t hal_coll_wait_fn(hal_request_t request, uint64_t timeout_ns);
typedef hal_status_t hal_coll_request_free_fn(hal_request_t request);
typedef hal_status_t hal_coll_run_fn(hal_comm_t comm, const hal_coll_args_t* args, hal_stream_t stream,
                                     uint64_t timeout_ns);
typedef struct hal_coll_api_t {
  uint64_t struct_size;
  hal_coll_comm_create_fn* comm_create;
  hal_coll_comm_destroy_fn* comm_destroy;
  hal_coll_comm_abort_fn* comm_abort;
  hal_coll_comm_get_async_error_fn* comm_get_async_error;
  hal_coll_post_fn* post;
  hal_coll_test_fn* test;
  hal_coll_wait_fn* wait;
  hal_coll_request_free_fn* request_free;
  hal_coll_run_fn* run;
} hal_coll_api_t;
typedef uint32_t hal_fault_kind_t;
enum hal_fault_kind_e {
  HAL_FAULT_DEVICE_LOST = 0,
  HAL_FAULT_HANG = 1,
  HAL_FAULT_SLOW_LINK = 2,
  HAL_FAULT_CORRUPT_RESULT = 3,
  HAL_FAULT_TELEMETRY_EXCURSION = 4,
  HAL_FAULT_CRASH = 5,
  HAL_FAULT_KIND_COUNT_V1 = 6
};
typedef struct hal_fault_spec_t {
  uint64_t struct_size;
  hal_fault_kind_t kind;
  uint32_t device;
  uint64_t after_ops;
  uint64_t duration_ns;
  double factor;
  hal_field_id_t field;
  uint32_t reserved0;
  double value;
} hal_fault_spec_t;
typedef struct hal_ext_fault_injection_t {
  hal_ext_header_t header;
  uint64_t supported_kinds;
  hal_status_t (*inject)(const hal_fault_spec_t* spec);
  hal_status_t (*clear)(uint32_t device);
} hal_ext_fault_injection_t;
typedef struct hal_kernel_scan_result_t {
  uint64_t non_finite;
  double sum_squares;
  double amax;
} hal_kernel_scan_result_t;
typedef hal_status_t hal_kernel_grad_scan_fn(uint32_t device, const void* data, uint64_t count,
                                             hal_dtype_t dtype, hal_kernel_scan_result_t* out);
typedef hal_status_t hal_kernel_shuffle_fn(uint32_t device, const void* src, const void* base, void* dst,
                                           uint64_t count, uint32_t elem_size, uint32_t inverse);
typedef hal_status_t hal_kernel_checksum_fn(uint32_t device, const void* data, uint64_t bytes, uint64_t* out);
typedef hal_status_t hal_kernel_moe_permute_fn(uint32_t device, const void* tokens, uint64_t num_tokens,
                                               uint64_t row_bytes, const int64_t* row_of, uint32_t top_k,
                                               void* out);
typedef hal_status_t hal_kernel_moe_unpermute_fn(uint32_t device, const void* expert_out,
                                                 const int64_t* row_of, const float* weights,
                                                 uint64_t num_tokens, uint32_t top_k, uint64_t hidden,
                                                 hal_dtype_t dtype, void* out);
typedef struct hal_ext_kernels_t {
  hal_ext_header_t header;
  hal_kernel_grad_scan_fn* grad_scan;
  hal_kernel_shuffle_fn* shuffle;
  hal_kernel_checksum_fn* checksum;
  hal_kernel_moe_permute_fn* moe_permute;
  hal_kernel_moe_unpermute_fn* moe_unpermute;
} hal_ext_kernels_t;
#define HAL_CAP_MULTI_RANK (UINT64_C(1) << 0)
#define HAL_CAP_STREAMS (UINT64_C(1) << 1)
#define HAL_CAP_HOST_MEMORY (UINT64_C(1) << 2)
#define HAL_CAP_FAULT_INJECTION (UINT64_C(1) << 3)
#define HAL_CAP_KERNELS (UINT64_C(1) << 4)
typedef struct hal_api_t {
  uint64_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* name;
  const char* version;
  uint64_t capabilities;
  const hal_ext_header_t* extensions;
  hal_init_fn* init;
  hal_finalize_fn* finalize;
  hal_get_last_error_fn* get_last_error;
  const hal_device_api_t* device;
  const hal_telemetry_api_t* telemetry;
  const hal_coll_api_t* coll;
} hal_api_t;
typedef const hal_api_t* hal_get_api_v1_fn(uint32_t host_major, uint32_t host_minor);
enum hal_v1_sizes_e {
  HAL_API_V1_0_SIZE = sizeof(hal_api_t),
  HAL_DEVICE_API_V1_0_SIZE = sizeof(hal_device_api_t),
  HAL_TELEMETRY_API_V1_0_SIZE = sizeof(hal_telemetry_api_t),
  HAL_COLL_API_V1_0_SIZE = offsetof(hal_coll_api_t, run),
  HAL_INIT_ARGS_V1_0_SIZE = sizeof(hal_init_args_t),
  HAL_DEVICE_PROPS_V1_0_SIZE = sizeof(hal_device_props_t),
  HAL_SELF_TEST_RESULT_V1_0_SIZE = sizeof(hal_self_test_result_t),
  HAL_BOOTSTRAP_V1_0_SIZE = sizeof(hal_bootstrap_t),
  HAL_COMM_CREATE_ARGS_V1_0_SIZE = sizeof(hal_comm_create_args_t),
  HAL_COLL_ARGS_V1_0_SIZE = sizeof(hal_coll_args_t),
  HAL_FAULT_SPEC_V1_0_SIZE = sizeof(hal_fault_spec_t),
  HAL_EXT_FAULT_INJECTION_V1_0_SIZE = sizeof(hal_ext_fault_injection_t)
};
enum hal_v1_1_sizes_e { HAL_COLL_API_V1_1_SIZE = sizeof(hal_coll_api_t) };
enum hal_v1_2_sizes_e { HAL_EXT_KERNELS_V1_2_SIZE = sizeof(hal_ext_kernels_t) };
HAL_STATIC_ASSERT(sizeof(void*) == 8, hal_needs_64_bit_pointers);
HAL_STATIC_ASSERT(sizeof(hal_telemetry_sample_t) == 32, hal_sample_layout);
HAL_STATIC_ASSERT(sizeof(hal_field_info_t) == 80, hal_field_info_layout);
HAL_STATIC_ASSERT(sizeof(hal_coll_args_t) == 88, hal_coll_args_layout);
HAL_STATIC_ASSERT(sizeof(hal_api_t) == 96, hal_api_layout);
HAL_STATIC_ASSERT(sizeof(hal_coll_api_t) == 80, hal_coll_api_layout);
HAL_STATIC_ASSERT(sizeof(hal_device_props_t) == 272, hal_device_props_layout);
/* HAL ABI 1.2's layout, literal. */
HAL_STATIC_ASSERT(sizeof(hal_api_t) == 96, hal_1_2_api);
HAL_STATIC_ASSERT(sizeof(hal_device_api_t) == 80, hal_1_2_device_api);
HAL_STATIC_ASSERT(sizeof(hal_telemetry_api_t) == 24, hal_1_2_telemetry_api);
HAL_STATIC_ASSERT(sizeof(hal_coll_api_t) == 80, hal_1_2_coll_api);
HAL_STATIC_ASSERT(sizeof(hal_init_args_t) == 24, hal_1_2_init_args);
HAL_STATIC_ASSERT(sizeof(hal_device_props_t) == 272, hal_1_2_device_props);
HAL_STATIC_ASSERT(sizeof(hal_self_test_result_t) == 312, hal_1_2_self_test_result);
HAL_STATIC_ASSERT(sizeof(hal_bootstrap_t) == 48, hal_1_2_bootstrap);
HAL_STATIC_ASSERT(sizeof(hal_comm_create_args_t) == 40, hal_1_2_comm_create_args);
HAL_STATIC_ASSERT(sizeof(hal_coll_args_t) == 88, hal_1_2_coll_args);
HAL_STATIC_ASSERT(sizeof(hal_fault_spec_t) == 56, hal_1_2_fault_spec);
HAL_STATIC_ASSERT(sizeof(hal_ext_fault_injection_t) == 48, hal_1_2_ext_fault_injection);
HAL_STATIC_ASSERT(sizeof(hal_telemetry_sample_t) == 32, hal_1_2_sample);
HAL_STATIC_ASSERT(sizeof(hal_field_info_t) == 80, hal_1_2_field_info);
HAL_STATIC_ASSERT(sizeof(hal_ext_kernels_t) == 64, hal_1_2_ext_kernels);

#ifdef __cplusplus
}
#endif
#endif /* SIGMA_HAL_H_ */
