/*
 * The smallest correct HAL plugin: copy this file to start a vendor plugin.
 *
 * It offers one device whose memory is host memory, collectives for a world
 * of one rank, two telemetry fields and a self-test, and -- so that you can
 * see how an extension is chained and so that the conformance suite can drive
 * the abort paths -- the fault-injection extension for DEVICE_LOST and HANG.
 *
 * Build it against the installed package (see CMakeLists.txt beside it) and
 * check it with:  sigma-hal-conformance --plugin ./libsigma_hal_skeleton.so
 *
 * Written in C11 (for _Thread_local); the headers it includes are C99.
 */
#include <sigma/hal.h>
#include <sigma/hal_support.h> /* dtype sizes and the standard fields: the HAL's companion */

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Our vendor-specific telemetry field: ids from HAL_FIELD_VENDOR_FIRST up. */
#define SKELETON_FIELD_OPS_COMPLETED (HAL_FIELD_VENDOR_FIRST + 1u)
#define SKELETON_ALIGNMENT 64u

/* ------------------------------------------------------------------------- */
/* Plugin-wide state. One mutex guards all of it: a real vendor would use     */
/* finer locks, but correctness first.                                        */
/* ------------------------------------------------------------------------- */

typedef struct allocation {
  void* ptr;
  uint64_t size;
  struct allocation* next;
} allocation;

struct hal_comm_s {
  int aborted;              /* set by comm_abort, finalize or a fault */
  hal_status_t async_error; /* first asynchronous error, HAL_OK if none */
  struct hal_comm_s* next;  /* in the plugin's list of live comms */
};

struct hal_request_s {
  hal_comm_t comm;     /* NULL once the comm was destroyed */
  hal_status_t status; /* HAL_IN_PROGRESS until finished */
  struct hal_request_s* next;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER; /* signalled when a request finishes */
static int g_refs;                                     /* init reference count */
static allocation* g_allocs;                           /* live allocations, freed by the last finalize */
static uint64_t g_bytes_in_use;                        /* telemetry: HAL_FIELD_MEMORY_USED_BYTES */
static uint64_t g_ops_completed;                       /* telemetry: SKELETON_FIELD_OPS_COMPLETED */
static struct hal_comm_s* g_comms;                     /* live communicators */
static struct hal_request_s* g_reqs;                   /* live requests */
static int g_device_lost;                              /* fault: DEVICE_LOST fired */
static uint64_t g_hang_after = UINT64_MAX;             /* fault: hang the op after this many more */

/* The per-thread message behind get_last_error. */
static _Thread_local char t_error[256];

static hal_status_t fail(hal_status_t status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_error, sizeof t_error, fmt, ap);
  va_end(ap);
  return status;
}

static const char* skeleton_get_last_error(void) { return t_error; }

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Every entry that names a device starts with this. Caller holds g_mu. */
static hal_status_t check_device_locked(uint32_t device) {
  if (g_refs == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: not initialised");
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: no device %u (there is 1)", device);
  if (g_device_lost) return fail(HAL_ERR_DEVICE_LOST, "skeleton: device 0 was lost (injected fault)");
  return HAL_OK;
}

static hal_status_t check_device(uint32_t device) {
  pthread_mutex_lock(&g_mu);
  hal_status_t st = check_device_locked(device);
  pthread_mutex_unlock(&g_mu);
  return st;
}

/* ------------------------------------------------------------------------- */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------- */

static hal_status_t skeleton_init(const hal_init_args_t* args) {
  if (args == NULL || args->struct_size < HAL_INIT_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: init args NULL or struct_size too small");
  pthread_mutex_lock(&g_mu);
  g_refs++; /* the first call would open the driver here */
  pthread_mutex_unlock(&g_mu);
  return HAL_OK;
}

static hal_status_t skeleton_finalize(void) {
  pthread_mutex_lock(&g_mu);
  if (g_refs == 0) {
    pthread_mutex_unlock(&g_mu);
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: finalize without init");
  }
  if (--g_refs > 0) {
    pthread_mutex_unlock(&g_mu);
    return HAL_OK;
  }
  /* Last reference: release everything the host left behind. */
  while (g_reqs) {
    struct hal_request_s* r = g_reqs;
    g_reqs = r->next;
    free(r);
  }
  while (g_comms) {
    struct hal_comm_s* c = g_comms;
    g_comms = c->next;
    free(c);
  }
  while (g_allocs) {
    allocation* a = g_allocs;
    g_allocs = a->next;
    free(a->ptr);
    free(a);
  }
  g_bytes_in_use = 0;
  g_ops_completed = 0;
  g_device_lost = 0;
  g_hang_after = UINT64_MAX;
  pthread_cond_broadcast(&g_cv); /* no waiter may be left: the host broke the rules if so */
  pthread_mutex_unlock(&g_mu);
  return HAL_OK;
}

/* ------------------------------------------------------------------------- */
/* Device and memory                                                         */
/* ------------------------------------------------------------------------- */

static hal_status_t skeleton_get_count(uint32_t* count) {
  if (count == NULL) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: count is NULL");
  *count = 1;
  return HAL_OK;
}

static hal_status_t skeleton_get_props(uint32_t device, hal_device_props_t* props) {
  if (props == NULL || props->struct_size < HAL_DEVICE_PROPS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: props NULL or struct_size too small");
  hal_status_t st = check_device(device);
  if (st != HAL_OK) return st;
  uint64_t size = props->struct_size; /* keep the host's size, zero only what we know */
  memset(props, 0, sizeof *props);
  props->struct_size = size;
  snprintf(props->name, sizeof props->name, "skeleton0");
  snprintf(props->uuid, sizeof props->uuid, "skeleton-0");
  props->memory_kind = HAL_MEMORY_HOST;
  props->memory_bytes = 1ull << 30; /* what we allow, not what the host has */
  props->alignment_bytes = SKELETON_ALIGNMENT;
  /* peak_flops stay 0: the skeleton does not know this machine's peak. */
  return HAL_OK;
}

static hal_status_t skeleton_mem_alloc(uint32_t device, uint64_t size, uint64_t alignment, void** ptr) {
  if (ptr == NULL) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: ptr is NULL");
  if (alignment != 0 && (alignment & (alignment - 1)) != 0)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: alignment %llu is not a power of two",
                (unsigned long long)alignment);
  if (alignment < SKELETON_ALIGNMENT) alignment = SKELETON_ALIGNMENT;
  pthread_mutex_lock(&g_mu);
  hal_status_t st = check_device_locked(device);
  if (st == HAL_OK && size > (1ull << 30) - g_bytes_in_use)
    st = fail(HAL_ERR_OUT_OF_MEMORY, "skeleton: %llu bytes asked, %llu of 1 GiB free",
              (unsigned long long)size, (unsigned long long)((1ull << 30) - g_bytes_in_use));
  void* p = NULL;
  allocation* a = NULL;
  if (st == HAL_OK) {
    a = malloc(sizeof *a);
    /* Size 0 still gets a unique pointer: allocate one aligned block. */
    if (a == NULL || posix_memalign(&p, (size_t)alignment, size ? (size_t)size : 1) != 0) {
      free(a);
      st = fail(HAL_ERR_OUT_OF_MEMORY, "skeleton: host allocation of %llu bytes failed",
                (unsigned long long)size);
    }
  }
  if (st == HAL_OK) {
    a->ptr = p;
    a->size = size;
    a->next = g_allocs;
    g_allocs = a;
    g_bytes_in_use += size;
    *ptr = p;
  }
  pthread_mutex_unlock(&g_mu);
  return st;
}

static hal_status_t skeleton_mem_free(uint32_t device, void* ptr) {
  if (ptr == NULL) return HAL_OK;
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: no device %u", device);
  pthread_mutex_lock(&g_mu);
  for (allocation** pp = &g_allocs; *pp; pp = &(*pp)->next) {
    if ((*pp)->ptr == ptr) {
      allocation* a = *pp;
      *pp = a->next;
      g_bytes_in_use -= a->size;
      pthread_mutex_unlock(&g_mu);
      free(a->ptr);
      free(a);
      return HAL_OK;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: %p was not allocated by this plugin", ptr);
}

static hal_status_t skeleton_memcpy(uint32_t device, void* dst, const void* src, uint64_t size,
                                    hal_copy_kind_t kind, hal_stream_t stream) {
  (void)stream; /* no streams: every copy is synchronous */
  if (kind > HAL_COPY_DEVICE_TO_DEVICE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: unknown copy kind %u", kind);
  if (size > 0 && (dst == NULL || src == NULL))
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: NULL buffer in memcpy");
  hal_status_t st = check_device(device);
  if (st != HAL_OK) return st;
  if (size > 0) memmove(dst, src, (size_t)size);
  return HAL_OK;
}

/* GEMM twice, in two loop orders, so rounding differs only within tolerance. */
static double gemm_check(int n) {
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n);
  float* c1 = calloc((size_t)n * n, sizeof(float));
  double* c2 = calloc((size_t)n * n, sizeof(double));
  double worst = -1.0;
  if (a && b && c1 && c2) {
    for (int i = 0; i < n * n; i++) {
      a[i] = (float)((i * 7 % 13) - 6) / 8.0f;
      b[i] = (float)((i * 5 % 11) - 5) / 4.0f;
    }
    for (int i = 0; i < n; i++) /* i-k-j order, fp32: the "device" result */
      for (int k = 0; k < n; k++)
        for (int j = 0; j < n; j++) c1[i * n + j] += a[i * n + k] * b[k * n + j];
    for (int i = 0; i < n; i++) /* i-j-k order, fp64: the reference */
      for (int j = 0; j < n; j++)
        for (int k = 0; k < n; k++) c2[i * n + j] += (double)a[i * n + k] * b[k * n + j];
    worst = 0.0;
    for (int i = 0; i < n * n; i++) {
      double err = fabs(c1[i] - c2[i]) / (fabs(c2[i]) + 1.0);
      if (err > worst) worst = err;
    }
  }
  free(a);
  free(b);
  free(c1);
  free(c2);
  return worst;
}

static hal_status_t skeleton_self_test(uint32_t device, uint64_t budget, hal_self_test_result_t* r) {
  if (r == NULL || r->struct_size < HAL_SELF_TEST_RESULT_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: result NULL or struct_size too small");
  hal_status_t st = check_device(device);
  if (st != HAL_OK) return st;
  uint64_t size = r->struct_size;
  memset(r, 0, sizeof *r);
  r->struct_size = size;
  uint64_t t0 = now_ns();
  r->gemm_max_rel_error = gemm_check(64);
  /* Memory pattern: write address-derived words, read them back. */
  uint64_t bytes = budget ? budget : (8ull << 20);
  if (bytes > (256ull << 20)) bytes = 256ull << 20;
  size_t words = (size_t)(bytes / 8);
  uint64_t *buf = malloc(words * 8), *copy = malloc(words * 8);
  if (buf == NULL || copy == NULL) {
    free(buf);
    free(copy);
    return fail(HAL_ERR_OUT_OF_MEMORY, "skeleton: self-test buffer of %llu bytes", (unsigned long long)bytes);
  }
  volatile uint64_t* vbuf = buf; /* volatile: the read-back must really read memory */
  for (size_t i = 0; i < words; i++) vbuf[i] = (uint64_t)i * 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < words; i++)
    if (vbuf[i] != (uint64_t)i * 0x9E3779B97F4A7C15ull) r->memory_pattern_errors++;
  r->memory_bytes_tested = (uint64_t)words * 8;
  uint64_t c0 = now_ns();
  memcpy(copy, buf, words * 8);
  uint64_t c1 = now_ns();
  if (copy[words - 1] != buf[words - 1]) r->memory_pattern_errors++;
  r->copy_bandwidth = (double)(words * 8) / ((double)(c1 - c0 + 1) * 1e-9);
  free(buf);
  free(copy);
  r->passed = r->gemm_max_rel_error >= 0 && r->gemm_max_rel_error < 1e-4 && r->memory_pattern_errors == 0;
  r->duration_s = (double)(now_ns() - t0) * 1e-9;
  snprintf(r->message, sizeof r->message, "gemm rel err %.2e, %llu pattern errors, copy %.1f GB/s",
           r->gemm_max_rel_error, (unsigned long long)r->memory_pattern_errors, r->copy_bandwidth * 1e-9);
  return HAL_OK;
}

/* ------------------------------------------------------------------------- */
/* Telemetry: two real fields, nothing invented.                             */
/* ------------------------------------------------------------------------- */

static const hal_field_info_t k_fields[2] = {
    {HAL_FIELD_MEMORY_USED_BYTES, HAL_VALUE_U64, 0, 0, "memory_used", "B"},
    {SKELETON_FIELD_OPS_COMPLETED, HAL_VALUE_U64, HAL_FIELD_FLAG_MONOTONIC, 0, "skeleton.ops_completed",
     "count"},
};

static hal_status_t skeleton_list_fields(uint32_t device, hal_field_info_t* fields, uint32_t capacity,
                                         uint32_t* count) {
  if (count == NULL) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: count is NULL");
  hal_status_t st = check_device(device);
  if (st != HAL_OK) return st;
  *count = 2;
  for (uint32_t i = 0; fields != NULL && i < capacity && i < 2; i++) fields[i] = k_fields[i];
  return HAL_OK;
}

static hal_status_t skeleton_read(uint32_t device, const hal_field_id_t* ids, uint32_t n,
                                  hal_telemetry_sample_t* samples) {
  if (n > 0 && (ids == NULL || samples == NULL))
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: ids or samples is NULL");
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: no device %u", device);
  pthread_mutex_lock(&g_mu);
  uint64_t t = now_ns();
  for (uint32_t i = 0; i < n; i++) {
    hal_telemetry_sample_t* s = &samples[i];
    memset(s, 0, sizeof *s);
    s->id = ids[i];
    s->type = HAL_VALUE_U64;
    if (g_device_lost) {
      s->status = HAL_ERR_DEVICE_LOST; /* per field: the call itself still works */
    } else if (ids[i] == HAL_FIELD_MEMORY_USED_BYTES) {
      s->value.u64 = g_bytes_in_use;
      s->timestamp_ns = t;
    } else if (ids[i] == SKELETON_FIELD_OPS_COMPLETED) {
      s->value.u64 = g_ops_completed;
      s->timestamp_ns = t;
    } else {
      s->status = HAL_ERR_NOT_SUPPORTED;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return HAL_OK;
}

/* ------------------------------------------------------------------------- */
/* Collectives for a world of one                                            */
/* ------------------------------------------------------------------------- */

static hal_status_t skeleton_comm_create(const hal_comm_create_args_t* args, hal_comm_t* comm) {
  if (args == NULL || comm == NULL || args->struct_size < HAL_COMM_CREATE_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: comm args NULL or struct_size too small");
  if (args->world_size == 0 || args->rank >= args->world_size)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: rank %u of world %u", args->rank, args->world_size);
  if (args->world_size != 1)
    return fail(HAL_ERR_NOT_SUPPORTED, "skeleton: only world size 1 (asked %u)", args->world_size);
  pthread_mutex_lock(&g_mu);
  hal_status_t st = check_device_locked(args->device);
  struct hal_comm_s* c = st == HAL_OK ? calloc(1, sizeof *c) : NULL;
  if (st == HAL_OK && c == NULL) st = fail(HAL_ERR_OUT_OF_MEMORY, "skeleton: comm");
  if (c) {
    c->next = g_comms;
    g_comms = c;
    *comm = c;
  }
  pthread_mutex_unlock(&g_mu);
  return st;
}

/* Finishes every pending request of comm with ABORTED. Caller holds g_mu. */
static void abort_locked(hal_comm_t comm) {
  comm->aborted = 1;
  if (comm->async_error == HAL_OK) comm->async_error = HAL_ERR_ABORTED;
  for (struct hal_request_s* r = g_reqs; r; r = r->next)
    if (r->comm == comm && r->status == HAL_IN_PROGRESS) r->status = HAL_ERR_ABORTED;
  pthread_cond_broadcast(&g_cv);
}

static int comm_is_live_locked(hal_comm_t comm) {
  for (struct hal_comm_s* c = g_comms; c; c = c->next)
    if (c == comm) return 1;
  return 0;
}

static hal_status_t skeleton_comm_abort(hal_comm_t comm) {
  pthread_mutex_lock(&g_mu);
  hal_status_t st = HAL_OK;
  if (!comm_is_live_locked(comm))
    st = fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: unknown comm");
  else
    abort_locked(comm);
  pthread_mutex_unlock(&g_mu);
  return st;
}

static hal_status_t skeleton_comm_destroy(hal_comm_t comm) {
  pthread_mutex_lock(&g_mu);
  for (struct hal_comm_s** pp = &g_comms; *pp; pp = &(*pp)->next) {
    if (*pp == comm) {
      abort_locked(comm);
      *pp = comm->next;
      for (struct hal_request_s* r = g_reqs; r; r = r->next)
        if (r->comm == comm) r->comm = NULL; /* requests outlive their comm */
      pthread_mutex_unlock(&g_mu);
      free(comm);
      return HAL_OK;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: unknown comm");
}

static hal_status_t skeleton_get_async_error(hal_comm_t comm, hal_status_t* error) {
  if (error == NULL) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: error is NULL");
  pthread_mutex_lock(&g_mu);
  hal_status_t st = HAL_OK;
  if (!comm_is_live_locked(comm))
    st = fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: unknown comm");
  else
    *error = comm->async_error;
  pthread_mutex_unlock(&g_mu);
  return st;
}

/* Checks args; for a world of one every data-moving op is a copy. */
static hal_status_t run_op(const hal_coll_args_t* a) {
  uint64_t esize = hal_dtype_size(a->dtype);
  if (a->op >= HAL_COLL_OP_COUNT_V1) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: unknown op %u", a->op);
  if (esize == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: unknown dtype %u", a->dtype);
  int reducing = a->op == HAL_COLL_ALL_REDUCE || a->op == HAL_COLL_REDUCE_SCATTER;
  if (reducing && a->reduce_op >= HAL_REDUCE_COUNT_V1)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: unknown reduce op %u", a->reduce_op);
  if (a->op == HAL_COLL_BROADCAST && a->root != 0)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: root %u in a world of 1", a->root);
  if (a->op == HAL_COLL_SEND || a->op == HAL_COLL_RECV)
    return fail(a->peer == 0 ? HAL_ERR_NOT_SUPPORTED : HAL_ERR_INVALID_ARGUMENT,
                "skeleton: send/recv needs a peer other than self (peer %u, world 1)", a->peer);
  if (a->op == HAL_COLL_BARRIER) return HAL_OK;
  if (a->op == HAL_COLL_ALL_TO_ALLV) {
    if (!a->send_counts || !a->send_displs || !a->recv_counts || !a->recv_displs)
      return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: all_to_allv needs all four count arrays");
    if (a->send_counts[0] != a->recv_counts[0])
      return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: send_counts[0] %llu != recv_counts[0] %llu",
                  (unsigned long long)a->send_counts[0], (unsigned long long)a->recv_counts[0]);
    if (a->send_counts[0] > 0 && a->sendbuf == a->recvbuf)
      return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: all_to_allv cannot run in place");
    if (a->send_counts[0] > 0 && (!a->sendbuf || !a->recvbuf))
      return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: NULL buffer");
    if (a->send_counts[0] > 0)
      memcpy((char*)a->recvbuf + a->recv_displs[0] * esize,
             (const char*)a->sendbuf + a->send_displs[0] * esize, a->send_counts[0] * esize);
    return HAL_OK;
  }
  if (a->count > UINT64_MAX / esize) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: count overflows");
  if (a->count > 0 && (!a->sendbuf || !a->recvbuf))
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: NULL buffer with count %llu",
                (unsigned long long)a->count);
  if (a->op == HAL_COLL_ALL_TO_ALL && a->count > 0 && a->sendbuf == a->recvbuf)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: all_to_all cannot run in place");
  /* sum/prod/min/max/avg of one contribution is that contribution; in place
   * (sendbuf == recvbuf for a world of one) there is nothing to move. */
  if (a->count > 0 && a->sendbuf != a->recvbuf) memcpy(a->recvbuf, a->sendbuf, a->count * esize);
  return HAL_OK;
}

static hal_status_t skeleton_post(hal_comm_t comm, const hal_coll_args_t* args, hal_stream_t stream,
                                  hal_request_t* request) {
  (void)stream;
  if (args == NULL || request == NULL || args->struct_size < HAL_COLL_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: args/request NULL or struct_size too small");
  pthread_mutex_lock(&g_mu);
  hal_status_t st = HAL_OK;
  if (!comm_is_live_locked(comm))
    st = fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: unknown comm");
  else if (comm->aborted)
    st = fail(HAL_ERR_ABORTED, "skeleton: comm was aborted");
  else
    st = check_device_locked(0);
  if (st == HAL_OK) st = run_op(args);
  struct hal_request_s* r = st == HAL_OK ? calloc(1, sizeof *r) : NULL;
  if (st == HAL_OK && r == NULL) st = fail(HAL_ERR_OUT_OF_MEMORY, "skeleton: request");
  if (r) {
    r->comm = comm;
    r->status = HAL_OK;
    if (g_hang_after == 0) { /* the injected hang: this op never finishes */
      r->status = HAL_IN_PROGRESS;
      g_hang_after = UINT64_MAX;
    } else {
      if (g_hang_after != UINT64_MAX) g_hang_after--;
      g_ops_completed++;
    }
    r->next = g_reqs;
    g_reqs = r;
    *request = r;
  }
  pthread_mutex_unlock(&g_mu);
  return st;
}

static hal_status_t skeleton_test(hal_request_t req) {
  if (req == NULL) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: request is NULL");
  pthread_mutex_lock(&g_mu);
  hal_status_t st = req->status;
  pthread_mutex_unlock(&g_mu);
  if (st < 0) return fail(st, "skeleton: the operation failed (aborted or device lost)");
  return st;
}

static hal_status_t skeleton_wait(hal_request_t req, uint64_t timeout_ns) {
  if (req == NULL) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: request is NULL");
  uint64_t deadline = timeout_ns > UINT64_MAX - now_ns() ? UINT64_MAX : now_ns() + timeout_ns;
  pthread_mutex_lock(&g_mu);
  while (req->status == HAL_IN_PROGRESS && timeout_ns > 0) {
    uint64_t t = now_ns();
    if (t >= deadline) break;
    /* pthread_cond_timedwait takes CLOCK_REALTIME: wait in short slices. */
    uint64_t slice = deadline - t < 10000000ull ? deadline - t : 10000000ull;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + slice;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    pthread_cond_timedwait(&g_cv, &g_mu, &ts);
  }
  hal_status_t st = req->status;
  pthread_mutex_unlock(&g_mu);
  if (st == HAL_IN_PROGRESS)
    return timeout_ns == 0 ? HAL_IN_PROGRESS
                           : fail(HAL_ERR_TIMEOUT, "skeleton: operation still running after %llu ns",
                                  (unsigned long long)timeout_ns);
  if (st < 0) return fail(st, "skeleton: the operation failed (aborted or device lost)");
  return st;
}

static hal_status_t skeleton_request_free(hal_request_t req) {
  if (req == NULL) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: request is NULL");
  pthread_mutex_lock(&g_mu);
  if (req->status == HAL_IN_PROGRESS && req->comm != NULL && !req->comm->aborted) {
    pthread_mutex_unlock(&g_mu);
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: request still running; abort its comm first");
  }
  for (struct hal_request_s** pp = &g_reqs; *pp; pp = &(*pp)->next) {
    if (*pp == req) {
      *pp = req->next;
      free(req);
      break;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return HAL_OK;
}

/* ------------------------------------------------------------------------- */
/* Fault injection                                                           */
/* ------------------------------------------------------------------------- */

static hal_status_t skeleton_inject(const hal_fault_spec_t* spec) {
  if (spec == NULL || spec->struct_size < HAL_FAULT_SPEC_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: fault spec NULL or struct_size too small");
  if (spec->device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: no device %u", spec->device);
  pthread_mutex_lock(&g_mu);
  hal_status_t st = HAL_OK;
  if (spec->kind == HAL_FAULT_DEVICE_LOST) {
    g_device_lost = 1;
    for (struct hal_comm_s* c = g_comms; c; c = c->next) {
      if (c->async_error == HAL_OK) c->async_error = HAL_ERR_DEVICE_LOST;
      for (struct hal_request_s* r = g_reqs; r; r = r->next)
        if (r->comm == c && r->status == HAL_IN_PROGRESS) r->status = HAL_ERR_DEVICE_LOST;
    }
    pthread_cond_broadcast(&g_cv);
  } else if (spec->kind == HAL_FAULT_HANG) {
    g_hang_after = spec->after_ops;
  } else {
    st = fail(HAL_ERR_NOT_SUPPORTED, "skeleton: fault kind %u not supported", spec->kind);
  }
  pthread_mutex_unlock(&g_mu);
  return st;
}

static hal_status_t skeleton_clear(uint32_t device) {
  if (device != 0) return fail(HAL_ERR_INVALID_ARGUMENT, "skeleton: no device %u", device);
  pthread_mutex_lock(&g_mu);
  g_device_lost = 0;
  g_hang_after = UINT64_MAX;
  pthread_mutex_unlock(&g_mu);
  return HAL_OK;
}

/* ------------------------------------------------------------------------- */
/* The tables, filled with designated initialisers, and the one export       */
/* ------------------------------------------------------------------------- */

static const hal_ext_fault_injection_t k_fault_ext = {
    .header = {.struct_size = sizeof(hal_ext_fault_injection_t),
               .type = HAL_EXT_FAULT_INJECTION,
               .next = NULL},
    .supported_kinds = (1u << HAL_FAULT_DEVICE_LOST) | (1u << HAL_FAULT_HANG),
    .inject = skeleton_inject,
    .clear = skeleton_clear,
};

static const hal_device_api_t k_device = {
    .struct_size = sizeof(hal_device_api_t),
    .get_count = skeleton_get_count,
    .get_props = skeleton_get_props,
    .mem_alloc = skeleton_mem_alloc,
    .mem_free = skeleton_mem_free,
    .memcpy = skeleton_memcpy,
    .stream_create = NULL, /* OPTIONAL: no streams */
    .stream_synchronize = NULL,
    .stream_destroy = NULL,
    .self_test = skeleton_self_test,
};

static const hal_telemetry_api_t k_telemetry = {
    .struct_size = sizeof(hal_telemetry_api_t),
    .list_fields = skeleton_list_fields,
    .read = skeleton_read,
};

static const hal_coll_api_t k_coll = {
    .struct_size = sizeof(hal_coll_api_t),
    .comm_create = skeleton_comm_create,
    .comm_destroy = skeleton_comm_destroy,
    .comm_abort = skeleton_comm_abort,
    .comm_get_async_error = skeleton_get_async_error,
    .post = skeleton_post,
    .test = skeleton_test,
    .wait = skeleton_wait,
    .request_free = skeleton_request_free,
};

/*
 * Device kernels (HAL_EXT_KERNELS) are not offered here: this skeleton's
 * memory is the host's (HAL_CAP_HOST_MEMORY), so libsigma runs its own CPU
 * kernels on the pointers. A chip whose memory the host cannot read chains
 * one more extension after k_fault_ext (k_fault_ext.header.next =
 * &k_kernels.header), sets HAL_CAP_KERNELS, and fills the entries it has:
 *
 *   static hal_status_t my_checksum(const hal_kernel_checksum_args_t* args);
 *     // args->struct_size >= HAL_KERNEL_CHECKSUM_ARGS_V1_3_SIZE, else
 *     // HAL_ERR_INVALID_ARGUMENT; then args->device, data, bytes, out
 *   static const hal_ext_kernels_t k_kernels = {
 *       .header = {sizeof(hal_ext_kernels_t), HAL_EXT_KERNELS, 0, NULL},
 *       .checksum = my_checksum,  // the others NULL: libsigma stages them
 *   };
 *
 * Every entry is optional; a NULL one, or one that returns
 * HAL_ERR_NOT_SUPPORTED, is done by the host through memcpy to host memory.
 * The conformance suite's kernels.* checks compare each entry with
 * libsigma's CPU kernel (vendors/cuda/kernels.cu offers all five).
 */
static const hal_api_t k_api = {
    .struct_size = sizeof(hal_api_t),
    .abi_major = HAL_ABI_MAJOR,
    .abi_minor = HAL_ABI_MINOR,
    .name = "skeleton",
    .version = "1.0.0",
    .capabilities = HAL_CAP_HOST_MEMORY | HAL_CAP_FAULT_INJECTION,
    .extensions = &k_fault_ext.header,
    .init = skeleton_init,
    .finalize = skeleton_finalize,
    .get_last_error = skeleton_get_last_error,
    .device = &k_device,
    .telemetry = &k_telemetry,
    .coll = &k_coll,
};

HAL_EXPORT const hal_api_t* hal_get_api_v1(uint32_t host_major, uint32_t host_minor) {
  (void)host_minor; /* a newer host minor is fine: it reads our struct_size */
  return host_major == HAL_ABI_MAJOR ? &k_api : NULL;
}
