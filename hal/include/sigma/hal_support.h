/*
 * sigma/hal_support.h -- the HAL's header-only C companion.
 *
 * What every plugin and every host of sigma/hal.h otherwise writes for
 * itself: the size of each dtype, the standard telemetry fields' names,
 * types, units and flags, the sigma-h64 checksum that HAL_EXT_KERNELS'
 * checksum entry computes, and the checks a host makes of a plugin's root
 * table before it initialises it. A plugin may include this header and
 * sigma/hal.h and nothing else of libsigma's (docs/hal.md).
 *
 * C99, compiles as C++ and under nvcc (the sigma-h64 mixing is callable in
 * device code there). Every function is static inline, pure or writing only
 * what it is handed, allocates nothing, and may be called from any thread,
 * concurrently. None blocks.
 */
#ifndef SIGMA_HAL_SUPPORT_H_
#define SIGMA_HAL_SUPPORT_H_

#include <sigma/hal.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define HAL_SUPPORT_HD static inline __host__ __device__
#else
#define HAL_SUPPORT_HD static inline
#endif

/* ------------------------------------------------------------------------- */
/* Data types                                                                */
/* ------------------------------------------------------------------------- */

/* Bytes per element of `dtype`; 0 for a dtype ABI 1 does not define. */
HAL_SUPPORT_HD uint64_t hal_dtype_size(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F32:
    case HAL_DTYPE_I32:
      return 4;
    case HAL_DTYPE_F16:
    case HAL_DTYPE_BF16:
      return 2;
    case HAL_DTYPE_F64:
    case HAL_DTYPE_I64:
      return 8;
    case HAL_DTYPE_U8:
      return 1;
    default:
      return 0;
  }
}

/* ------------------------------------------------------------------------- */
/* Standard telemetry fields                                                 */
/* ------------------------------------------------------------------------- */

/*
 * The description of standard field `id` (HAL_FIELD_TEMPERATURE_C ..
 * HAL_FIELD_RETIRED_PAGES): its name, value type, unit and flags, as a
 * plugin lists it. Writes *out and returns 1 for a standard id; returns 0
 * and leaves *out alone for any other (a vendor's own ids name themselves).
 */
static inline int hal_standard_field(hal_field_id_t id, hal_field_info_t* out) {
  static const struct {
    hal_value_type_t type;
    uint32_t flags;
    const char* name;
    const char* unit;
  } k[HAL_FIELD_STANDARD_COUNT_V1] = {
      {0, 0, "", ""},
      {HAL_VALUE_F64, 0, "temperature", "C"},
      {HAL_VALUE_F64, 0, "power", "W"},
      {HAL_VALUE_F64, HAL_FIELD_FLAG_MONOTONIC, "energy", "J"},
      {HAL_VALUE_F64, 0, "clock_compute", "MHz"},
      {HAL_VALUE_F64, 0, "clock_memory", "MHz"},
      {HAL_VALUE_F64, 0, "utilization", "%"},
      {HAL_VALUE_U64, 0, "memory_used", "B"},
      {HAL_VALUE_U64, 0, "memory_total", "B"},
      {HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, "ecc_correctable", "count"},
      {HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, "ecc_uncorrectable", "count"},
      {HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, "link_errors", "count"},
      {HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, "link_retries", "count"},
      {HAL_VALUE_U64, 0, "throttle_reasons", "mask"},
      {HAL_VALUE_I64, 0, "fatal_code", ""},
      {HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, "retired_pages", "count"},
  };
  hal_field_info_t f;
  size_t i;
  if (id == 0 || id >= HAL_FIELD_STANDARD_COUNT_V1) return 0;
  memset(&f, 0, sizeof f);
  f.id = id;
  f.type = k[id].type;
  f.flags = k[id].flags;
  for (i = 0; k[id].name[i] != '\0' && i + 1 < sizeof f.name; ++i) f.name[i] = k[id].name[i];
  for (i = 0; k[id].unit[i] != '\0' && i + 1 < sizeof f.unit; ++i) f.unit[i] = k[id].unit[i];
  *out = f;
  return 1;
}

/* ------------------------------------------------------------------------- */
/* sigma-h64                                                                 */
/* ------------------------------------------------------------------------- */

/*
 * The checksum HAL_EXT_KERNELS' checksum entry returns, defined so that a
 * device computes it in parallel: the bytes are read as little-endian 64-bit
 * words w_i (the last one zero-padded), t_i = hal_h64_word(w_i, i), the t_i
 * are added modulo 2^64 in any order, and the checksum is
 * hal_h64_finish(sum, bytes). fmix64 is MurmurHash3's 64-bit finaliser. Any
 * single flipped bit changes it; it is not a cryptographic hash.
 */
#define HAL_H64_GOLDEN UINT64_C(0x9E3779B97F4A7C15)
#define HAL_H64_LENGTH UINT64_C(0xC2B2AE3D27D4EB4F)

HAL_SUPPORT_HD uint64_t hal_h64_fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= UINT64_C(0xFF51AFD7ED558CCD);
  x ^= x >> 33;
  x *= UINT64_C(0xC4CEB9FE1A85EC53);
  x ^= x >> 33;
  return x;
}

/* The term of word `w` at word position `i` (from 0). */
HAL_SUPPORT_HD uint64_t hal_h64_word(uint64_t w, uint64_t i) {
  return hal_h64_fmix64(w + (i + 1) * HAL_H64_GOLDEN);
}

/* The checksum from the sum of every word's term and the length in bytes. */
HAL_SUPPORT_HD uint64_t hal_h64_finish(uint64_t sum, uint64_t bytes) {
  return hal_h64_fmix64(sum ^ (bytes * HAL_H64_LENGTH));
}

/* The checksum of `bytes` bytes at `data` (host memory), one word at a time:
 * the definition, for a plugin without a faster one and for tests. */
static inline uint64_t hal_h64(const void* data, uint64_t bytes) {
  const unsigned char* p = (const unsigned char*)data;
  uint64_t sum = 0, i, w;
  unsigned b;
  for (i = 0; i * 8 < bytes; ++i) {
    w = 0;
    for (b = 0; b < 8 && i * 8 + b < bytes; ++b) w |= (uint64_t)p[i * 8 + b] << (8 * b);
    sum += hal_h64_word(w, i);
  }
  return hal_h64_finish(sum, bytes);
}

/* ------------------------------------------------------------------------- */
/* Checking a plugin's root table                                            */
/* ------------------------------------------------------------------------- */

/* Writes the message a b c (cut to cap bytes, NUL terminated) and returns -1. */
static inline int hal_check_fail(char* why, size_t cap, const char* a, const char* b, const char* c) {
  if (why != NULL && cap > 0) snprintf(why, cap, "%s%s%s", a, b, c);
  return -1;
}

/* -1 when a table is NULL or smaller than its 1.0 size. */
static inline int hal_check_table(const void* table, uint64_t size, uint64_t min_size, const char* type_name,
                                  const char* root_field, char* why, size_t cap) {
  if (table == NULL)
    return hal_check_fail(why, cap, "hal_api_t.", root_field, " is NULL, but it is required");
  if (size >= min_size) return 0;
  if (why != NULL && cap > 0)
    snprintf(why, cap, "%s.struct_size is %llu, smaller than ABI 1.0's %llu bytes", type_name,
             (unsigned long long)size, (unsigned long long)min_size);
  return -1;
}

/* -1 with "<type>.<field> is NULL, but it is required" when the entry is NULL. */
#define HAL_CHECK_REQUIRED(type, table, field, why, cap)                                     \
  do {                                                                                       \
    if ((table)->field == NULL)                                                              \
      return hal_check_fail(why, cap, #type "." #field, " is NULL, but it is required", ""); \
  } while (0)

static inline int hal_check_tables(const hal_api_t* api, char* why, size_t cap) {
  const hal_device_api_t* d = api->device;
  const hal_telemetry_api_t* t = api->telemetry;
  const hal_coll_api_t* c = api->coll;
  if (hal_check_table(d, d ? d->struct_size : 0, HAL_DEVICE_API_V1_0_SIZE, "hal_device_api_t", "device", why,
                      cap) != 0)
    return -1;
  HAL_CHECK_REQUIRED(hal_device_api_t, d, get_count, why, cap);
  HAL_CHECK_REQUIRED(hal_device_api_t, d, get_props, why, cap);
  HAL_CHECK_REQUIRED(hal_device_api_t, d, mem_alloc, why, cap);
  HAL_CHECK_REQUIRED(hal_device_api_t, d, mem_free, why, cap);
  HAL_CHECK_REQUIRED(hal_device_api_t, d, memcpy, why, cap);
  HAL_CHECK_REQUIRED(hal_device_api_t, d, self_test, why, cap);
  if (hal_check_table(t, t ? t->struct_size : 0, HAL_TELEMETRY_API_V1_0_SIZE, "hal_telemetry_api_t",
                      "telemetry", why, cap) != 0)
    return -1;
  HAL_CHECK_REQUIRED(hal_telemetry_api_t, t, list_fields, why, cap);
  HAL_CHECK_REQUIRED(hal_telemetry_api_t, t, read, why, cap);
  if (hal_check_table(c, c ? c->struct_size : 0, HAL_COLL_API_V1_0_SIZE, "hal_coll_api_t", "coll", why,
                      cap) != 0)
    return -1;
  HAL_CHECK_REQUIRED(hal_coll_api_t, c, comm_create, why, cap);
  HAL_CHECK_REQUIRED(hal_coll_api_t, c, comm_destroy, why, cap);
  HAL_CHECK_REQUIRED(hal_coll_api_t, c, comm_abort, why, cap);
  HAL_CHECK_REQUIRED(hal_coll_api_t, c, comm_get_async_error, why, cap);
  HAL_CHECK_REQUIRED(hal_coll_api_t, c, post, why, cap);
  HAL_CHECK_REQUIRED(hal_coll_api_t, c, test, why, cap);
  HAL_CHECK_REQUIRED(hal_coll_api_t, c, wait, why, cap);
  HAL_CHECK_REQUIRED(hal_coll_api_t, c, request_free, why, cap);
  return 0;
}

/*
 * Checks what hal.h's reader rules ask of a root table before hal_init_fn is
 * called: major 1, every struct at least its 1.0 size, every REQUIRED entry
 * set, the stream entries all or none and matching HAL_CAP_STREAMS. Returns 0,
 * or -1 with the first problem found written to why (cap bytes, NUL
 * terminated, e.g. "hal_coll_api_t.wait is NULL, but it is required"). The
 * extension chain is the host's to walk (it knows which types it reads).
 */
static inline int hal_check_api(const hal_api_t* api, char* why, size_t cap) {
  const hal_device_api_t* d;
  int any, all;
  if (api == NULL) return hal_check_fail(why, cap, "the root table", " is NULL", "");
  /* The major first, whatever the size: another major may be another shape. */
  if (api->struct_size >= offsetof(hal_api_t, abi_major) + sizeof api->abi_major &&
      api->abi_major != HAL_ABI_MAJOR) {
    if (why != NULL && cap > 0)
      snprintf(why, cap, "implements HAL ABI major %u, this host supports major %u", (unsigned)api->abi_major,
               (unsigned)HAL_ABI_MAJOR);
    return -1;
  }
  if (api->struct_size < HAL_API_V1_0_SIZE) {
    if (why != NULL && cap > 0)
      snprintf(why, cap, "hal_api_t.struct_size is %llu, smaller than ABI 1.0's %u bytes",
               (unsigned long long)api->struct_size, (unsigned)HAL_API_V1_0_SIZE);
    return -1;
  }
  if (api->name == NULL || api->name[0] == '\0')
    return hal_check_fail(why, cap, "hal_api_t.name", " is NULL or empty", "");
  if (api->version == NULL) return hal_check_fail(why, cap, "hal_api_t.version", " is NULL", "");
  HAL_CHECK_REQUIRED(hal_api_t, api, init, why, cap);
  HAL_CHECK_REQUIRED(hal_api_t, api, finalize, why, cap);
  HAL_CHECK_REQUIRED(hal_api_t, api, get_last_error, why, cap);
  if (hal_check_tables(api, why, cap) != 0) return -1;
  d = api->device;
  any = d->stream_create != NULL || d->stream_synchronize != NULL || d->stream_destroy != NULL;
  all = d->stream_create != NULL && d->stream_synchronize != NULL && d->stream_destroy != NULL;
  if (any && !all)
    return hal_check_fail(why, cap, "hal_device_api_t", " stream entries must be all set or all NULL", "");
  if (((api->capabilities & HAL_CAP_STREAMS) != 0) != all)
    return hal_check_fail(why, cap, "HAL_CAP_STREAMS does not match the stream entries of ",
                          "hal_device_api_t", "");
  return 0;
}

#undef HAL_CHECK_REQUIRED

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SIGMA_HAL_SUPPORT_H_ */
