/*
 * Deliberately broken HAL plugins, one per BAD_* macro, built from the
 * skeleton with one thing wrong each (and two that are fine: a newer minor,
 * an older one). The loader and the conformance suite
 * must name exactly what is wrong, and never crash.
 */
#define hal_get_api_v1 skeleton_inner_get_api_v1
#include "skeleton.c"
#undef hal_get_api_v1

#ifndef BAD_MISSING_SYMBOL

/* A copy of the skeleton's root table, made as large as the largest case. */
static struct {
  hal_api_t api;
  void* trailing[4]; /* entries a newer minor would add */
} g_bad;
static hal_device_api_t g_bad_device;
static hal_coll_api_t g_bad_coll;

__attribute__((unused)) static hal_status_t bad_get_count(uint32_t* count) {
  (void)count;
  return 42; /* not a status ABI 1.0 defines */
}

__attribute__((unused)) static hal_status_t bad_init_unavailable(const hal_init_args_t* args) {
  (void)args;
  return fail(HAL_ERR_UNAVAILABLE, "bad: no accelerator found (driver returned error 100)");
}

/* Gives a wrong all-reduce result: the conformance suite must catch it. */
__attribute__((unused)) static hal_status_t bad_post_wrong(hal_comm_t comm, const hal_coll_args_t* args,
                                                           hal_stream_t stream, hal_request_t* request) {
  hal_status_t st = skeleton_post(comm, args, stream, request);
  if (st == HAL_OK && args->op == HAL_COLL_ALL_REDUCE && args->count > 3 && args->dtype == HAL_DTYPE_F32)
    ((float*)args->recvbuf)[3] += 1.0f;
  return st;
}

HAL_EXPORT const hal_api_t* hal_get_api_v1(uint32_t host_major, uint32_t host_minor) {
  const hal_api_t* inner = skeleton_inner_get_api_v1(host_major, host_minor);
  if (inner == NULL) return NULL;
  g_bad.api = *inner;
  g_bad_device = *inner->device;
  g_bad_coll = *inner->coll;
  g_bad.api.device = &g_bad_device;
  g_bad.api.coll = &g_bad_coll;
#if defined(BAD_SMALL_ROOT)
  g_bad.api.struct_size = HAL_API_V1_0_SIZE - 16;
#elif defined(BAD_LARGE_ROOT)
  /* Fine: a newer minor with unknown trailing entries must load. */
  g_bad.api.struct_size = sizeof(g_bad);
  g_bad.api.abi_minor = HAL_ABI_MINOR + 3;
  g_bad.trailing[0] = (void*)&g_bad; /* non-NULL garbage the host must not call */
#elif defined(BAD_NULL_REQUIRED)
  g_bad_coll.comm_abort = NULL;
#elif defined(BAD_WRONG_MAJOR)
  g_bad.api.abi_major = HAL_ABI_MAJOR + 1;
#elif defined(BAD_UNDEFINED_STATUS)
  g_bad_device.get_count = bad_get_count;
#elif defined(BAD_RETURNS_NULL)
  return NULL;
#elif defined(BAD_INIT_UNAVAILABLE)
  g_bad.api.init = bad_init_unavailable;
#elif defined(BAD_SMALL_SUBTABLE)
  g_bad_coll.struct_size = HAL_COLL_API_V1_0_SIZE - 8;
#elif defined(BAD_WRONG_RESULT)
  g_bad_coll.post = bad_post_wrong;
#elif defined(BAD_OLD_MINOR)
  /* Fine: an ABI 1.0 plugin, whose collective table ends before `run`. The
   * slot past its struct_size holds garbage the host must never call. */
  g_bad.api.abi_minor = 0;
  g_bad_coll.struct_size = HAL_COLL_API_V1_0_SIZE;
  g_bad_coll.run = (hal_coll_run_fn*)(uintptr_t)&g_bad;
#else
#error "define one BAD_* macro"
#endif
  return &g_bad.api;
}

#endif /* BAD_MISSING_SYMBOL */
