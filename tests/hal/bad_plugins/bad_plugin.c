/*
 * Deliberately broken HAL plugins, one per BAD_* macro, built from the
 * skeleton with one thing wrong each (and two that are fine: a newer minor,
 * an older one). The loader and the conformance suite
 * must name exactly what is wrong, and never crash.
 */
#define hal_get_api_v1 skeleton_inner_get_api_v1
#include "skeleton.c"
#undef hal_get_api_v1

#if defined(BAD_DATA_SYMBOL)
/* The discovery name is exported, but as a data object: calling it would
 * jump into these bytes. */
HAL_EXPORT const unsigned char hal_get_api_v1[16] = {0xde, 0xad, 0xbe, 0xef};
#elif !defined(BAD_MISSING_SYMBOL)

/* A copy of the skeleton's root table, made as large as the largest case. */
static struct {
  hal_api_t api;
  void* trailing[4]; /* entries a newer minor would add */
} g_bad;
static hal_device_api_t g_bad_device;
static hal_coll_api_t g_bad_coll;
__attribute__((unused)) static hal_telemetry_api_t g_bad_telemetry;

__attribute__((unused)) static hal_status_t bad_get_count(uint32_t* count) {
  (void)count;
  return 42; /* not a status ABI 1.0 defines */
}

__attribute__((unused)) static hal_status_t bad_init_unavailable(const hal_init_args_t* args) {
  (void)args;
  return fail(HAL_ERR_UNAVAILABLE, "bad: no accelerator found (driver returned error 100)");
}

__attribute__((unused)) static const char* bad_null_last_error(void) { return NULL; }

/* A message far longer than any host should copy whole (static: nothing
 * to free when the plugin is unloaded after its failed init). */
#if defined(BAD_LONG_LAST_ERROR)
static char g_big_message[((size_t)64 << 20) + 1];
static const char* bad_long_last_error(void) {
  if (g_big_message[0] == '\0') memset(g_big_message, 'x', sizeof g_big_message - 1);
  return g_big_message;
}
#endif

/* Init fails, so the host reads the (broken) message. */
__attribute__((unused)) static hal_status_t bad_init_fails(const hal_init_args_t* args) {
  (void)args;
  return HAL_ERR_INTERNAL;
}

/* Claims four billion fields. */
__attribute__((unused)) static hal_status_t bad_huge_field_count(uint32_t device, hal_field_info_t* fields,
                                                                 uint32_t capacity, uint32_t* count) {
  (void)device;
  (void)fields;
  (void)capacity;
  *count = 0xFFFFFFFFu;
  return HAL_OK;
}

/* Writes one entry past the capacity it is given. */
__attribute__((unused)) static hal_status_t bad_field_overrun(uint32_t device, hal_field_info_t* fields,
                                                              uint32_t capacity, uint32_t* count) {
  (void)device;
  *count = 2;
  if (fields != NULL)
    for (uint32_t i = 0; i < capacity + 1; i++) {
      memset(&fields[i], 0, sizeof fields[i]);
      fields[i].id = HAL_FIELD_TEMPERATURE_C;
      fields[i].type = HAL_VALUE_F64;
      strcpy(fields[i].name, "temperature");
    }
  return HAL_OK;
}

/* One temperature field that reads NaN with HAL_OK: an invented number. */
__attribute__((unused)) static hal_status_t bad_nan_list(uint32_t device, hal_field_info_t* fields,
                                                         uint32_t capacity, uint32_t* count) {
  if (count == NULL) return fail(HAL_ERR_INVALID_ARGUMENT, "bad: count is NULL");
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "bad: no device %u", device);
  *count = 1;
  if (fields != NULL && capacity > 0) {
    memset(&fields[0], 0, sizeof fields[0]);
    fields[0].id = HAL_FIELD_TEMPERATURE_C;
    fields[0].type = HAL_VALUE_F64;
    strcpy(fields[0].name, "temperature");
    strcpy(fields[0].unit, "C");
  }
  return HAL_OK;
}

__attribute__((unused)) static hal_status_t bad_nan_read(uint32_t device, const hal_field_id_t* ids,
                                                         uint32_t n, hal_telemetry_sample_t* samples) {
  if (n > 0 && (ids == NULL || samples == NULL))
    return fail(HAL_ERR_INVALID_ARGUMENT, "bad: NULL ids or samples");
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "bad: no device %u", device);
  for (uint32_t i = 0; i < n; i++) {
    memset(&samples[i], 0, sizeof samples[i]);
    samples[i].id = ids[i];
    samples[i].type = HAL_VALUE_F64;
    if (ids[i] == HAL_FIELD_TEMPERATURE_C) {
      samples[i].value.f64 = NAN;
      samples[i].timestamp_ns = now_ns();
    } else {
      samples[i].status = HAL_ERR_NOT_SUPPORTED;
    }
  }
  return HAL_OK;
}

/* Reads telemetry correctly, then writes two more samples past the array
 * it was given: the host must see the overrun, not lose its heap. */
#if defined(BAD_SAMPLE_OVERRUN)
static hal_telemetry_read_fn* g_inner_read;
static hal_status_t bad_overrun_read(uint32_t device, const hal_field_id_t* ids, uint32_t n,
                                     hal_telemetry_sample_t* samples) {
  hal_status_t st = g_inner_read(device, ids, n, samples);
  if (st == HAL_OK && n > 0)
    for (uint32_t i = n; i < n + 2; i++) samples[i] = samples[0];
  return st;
}
#endif

/* Creates communicators, but first asks the bootstrap for a key of 1025
 * bytes, one more than hal.h allows: the conformance suite must say so. */
#if defined(BAD_LONG_KEY)
static hal_coll_comm_create_fn* g_inner_create;
static hal_status_t bad_long_key_create(const hal_comm_create_args_t* args, hal_comm_t* comm) {
  if (args != NULL && args->bootstrap != NULL) {
    char key[1026];
    memset(key, 'k', 1025);
    key[1025] = '\0';
    (void)args->bootstrap->kv_set(args->bootstrap->ctx, key, "v", 1);
  }
  return g_inner_create(args, comm);
}
#endif

/* Gives a wrong all-reduce result: the conformance suite must catch it. */
__attribute__((unused)) static hal_status_t bad_post_wrong(hal_comm_t comm, const hal_coll_args_t* args,
                                                           hal_stream_t stream, hal_request_t* request) {
  hal_status_t st = skeleton_post(comm, args, stream, request);
  if (st == HAL_OK && args->op == HAL_COLL_ALL_REDUCE && args->count > 3 && args->dtype == HAL_DTYPE_F32)
    ((float*)args->recvbuf)[3] += 1.0f;
  return st;
}

#if defined(BAD_MISBEHAVE)
#include <signal.h>
#include <unistd.h>
/* The skeleton, except in the phase SIGMA_BAD_MISBEHAVE names ("ACTION:PHASE",
 * ACTION exit, crash or hang; PHASE discovery, init, props, collective or
 * finalize), where it exits with status 0, dies of SIGSEGV, or blocks for
 * ever ignoring abort: the conformance suite must fail that check by name
 * and go on. Two more break the request contract: "deaf:collective" posts
 * a request that never finishes and ignores abort (wait always times out),
 * "inprogress:collective" one whose wait answers IN_PROGRESS after a
 * non-zero timeout. */
static void misbehave(const char* phase) {
  const char* what = getenv("SIGMA_BAD_MISBEHAVE");
  const char* colon = what ? strchr(what, ':') : NULL;
  if (colon == NULL || strcmp(colon + 1, phase) != 0) return;
  fprintf(stderr, "bad plugin: misbehaving (%s) in %s\n", what, phase);
  fflush(stderr);
  if (strncmp(what, "exit:", 5) == 0) exit(0);
  if (strncmp(what, "crash:", 6) == 0) raise(SIGSEGV);
  if (strncmp(what, "hang:", 5) == 0)
    for (;;) pause();
}
static const hal_api_t* g_inner;
static hal_status_t mb_init(const hal_init_args_t* args) {
  misbehave("init");
  return g_inner->init(args);
}
static hal_status_t mb_finalize(void) {
  misbehave("finalize");
  return g_inner->finalize();
}
static hal_status_t mb_get_props(uint32_t device, hal_device_props_t* props) {
  misbehave("props");
  return g_inner->device->get_props(device, props);
}
static int g_broken_request; /* the address is the handle of a request that never finishes */
static int broken(const char* action) {
  const char* what = getenv("SIGMA_BAD_MISBEHAVE");
  return what != NULL && strncmp(what, action, strlen(action)) == 0 && strstr(what, ":collective") != NULL;
}
static hal_status_t mb_post(hal_comm_t comm, const hal_coll_args_t* args, hal_stream_t stream,
                            hal_request_t* request) {
  if (broken("deaf") || broken("inprogress")) {
    (void)comm, (void)args, (void)stream;
    *request = (hal_request_t)&g_broken_request;
    return HAL_OK;
  }
  misbehave("collective");
  return g_inner->coll->post(comm, args, stream, request);
}
static hal_status_t mb_wait(hal_request_t request, uint64_t timeout_ns) {
  if (request != (hal_request_t)&g_broken_request) return g_inner->coll->wait(request, timeout_ns);
  struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
  if (timeout_ns > 0 && timeout_ns < 10000000000u) nanosleep(&ts, NULL);
  return broken("inprogress") ? HAL_IN_PROGRESS : HAL_ERR_TIMEOUT;
}
static hal_status_t mb_test(hal_request_t request) {
  if (request != (hal_request_t)&g_broken_request) return g_inner->coll->test(request);
  return HAL_IN_PROGRESS;
}
static hal_status_t mb_request_free(hal_request_t request) {
  if (request != (hal_request_t)&g_broken_request) return g_inner->coll->request_free(request);
  return HAL_OK;
}
#endif

HAL_EXPORT const hal_api_t* hal_get_api_v1(uint32_t host_major, uint32_t host_minor) {
#if defined(BAD_MISBEHAVE)
  misbehave("discovery");
#endif
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
#elif defined(BAD_WRONG_MAJOR_SMALL_ROOT)
  /* A future major whose root table is smaller than ours: refused for its
   * major, which is what matters, not for its size. */
  g_bad.api.abi_major = HAL_ABI_MAJOR + 1;
  g_bad.api.struct_size = 24;
#elif defined(BAD_NULL_LAST_ERROR)
  g_bad.api.get_last_error = bad_null_last_error;
  g_bad.api.init = bad_init_fails;
#elif defined(BAD_LONG_LAST_ERROR)
  g_bad.api.get_last_error = bad_long_last_error;
  g_bad.api.init = bad_init_fails;
#elif defined(BAD_HUGE_FIELD_COUNT)
  g_bad_telemetry = *inner->telemetry;
  g_bad_telemetry.list_fields = bad_huge_field_count;
  g_bad.api.telemetry = &g_bad_telemetry;
#elif defined(BAD_NAN_TELEMETRY)
  g_bad_telemetry = *inner->telemetry;
  g_bad_telemetry.list_fields = bad_nan_list;
  g_bad_telemetry.read = bad_nan_read;
  g_bad.api.telemetry = &g_bad_telemetry;
#elif defined(BAD_SAMPLE_OVERRUN)
  g_bad_telemetry = *inner->telemetry;
  g_inner_read = inner->telemetry->read;
  g_bad_telemetry.read = bad_overrun_read;
  g_bad.api.telemetry = &g_bad_telemetry;
#elif defined(BAD_LONG_KEY)
  g_inner_create = inner->coll->comm_create;
  g_bad_coll.comm_create = bad_long_key_create;
#elif defined(BAD_FIELD_OVERRUN)
  g_bad_telemetry = *inner->telemetry;
  g_bad_telemetry.list_fields = bad_field_overrun;
  g_bad.api.telemetry = &g_bad_telemetry;
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
   * slot past its struct_size holds garbage the host must never call. It
   * also sets HAL_CAP_KERNELS, a bit 1.2 defined: the host ignores it. */
  g_bad.api.abi_minor = 0;
  g_bad.api.capabilities |= HAL_CAP_KERNELS;
  g_bad_coll.struct_size = HAL_COLL_API_V1_0_SIZE;
  g_bad_coll.run = (hal_coll_run_fn*)(uintptr_t)&g_bad;
#elif defined(BAD_MISBEHAVE)
  g_inner = inner;
  g_bad.api.init = mb_init;
  g_bad.api.finalize = mb_finalize;
  g_bad_device.get_props = mb_get_props;
  g_bad_coll.post = mb_post;
  g_bad_coll.wait = mb_wait;
  g_bad_coll.test = mb_test;
  g_bad_coll.request_free = mb_request_free;
#else
#error "define one BAD_* macro"
#endif
  return &g_bad.api;
}

#endif /* BAD_DATA_SYMBOL, BAD_MISSING_SYMBOL */
