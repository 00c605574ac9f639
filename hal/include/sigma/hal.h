/*
 * sigma/hal.h -- the libsigma hardware abstraction layer (HAL), ABI 1.3
 * (1.1 added the optional blocking hal_coll_run_fn at the end of
 * hal_coll_api_t; a 1.0 plugin loads and is posted to and waited on. 1.2
 * added the optional HAL_EXT_KERNELS extension: device kernels; a plugin
 * without it has its device buffers staged through the host. 1.3 gave each
 * kernels entry one args struct with struct_size; a 1.2 plugin's
 * positional entries, hal_ext_kernels_v1_2_t, keep working. Each released
 * version's declarations are frozen in sigma/abi/hal_1_<minor>.h).
 *
 * This is the whole contract between libsigma (the "host") and an accelerator
 * vendor's plugin. A plugin is a shared object that includes only this header
 * and exports one symbol, hal_get_api_v1(). Everything else is reached through
 * the tables that symbol returns.
 *
 * The header is C99 and compiles as C++. It uses fixed-width types only; every
 * enum is a set of named constants stored in a fixed-width integer field, so
 * the C and C++ layouts agree and no enum's size is left to a compiler.
 *
 * ---------------------------------------------------------------------------
 * Version rules
 * ---------------------------------------------------------------------------
 *  1. HAL_ABI_MAJOR changes only when an existing field changes meaning,
 *     moves, or is removed. The host keeps an adapter for the previous major.
 *  2. Within a major, every table and every argument struct only grows at its
 *     end, and the minor goes up. The first field of each is `struct_size`:
 *     the size, in bytes, of the struct as the writer compiled it.
 *  3. Reader rules. A reader accepts a struct_size LARGER than it knows and
 *     ignores the tail. A reader refuses a struct_size SMALLER than the 1.0
 *     size of that struct (HAL_ERR_INVALID_ARGUMENT from a plugin; a load
 *     error from the host). A field that lies past struct_size, or a function
 *     pointer that is NULL, means "not supported": never a crash. Use
 *     HAL_HAS_FIELD() for fields added after 1.0.
 *  4. Every entry marked REQUIRED must be non-NULL (all of them date from
 *     1.0; later minors add only OPTIONAL ones); the host's
 *     loader refuses a plugin that leaves one NULL and names the field.
 *     Entries marked OPTIONAL may be NULL.
 *  5. Capability bits and extension types are read as of the minor the
 *     plugin declares (hal_api_t.abi_minor): a bit or an extension type a
 *     later minor defined is ignored from a plugin that declares an earlier
 *     one (it never promised what that bit means), never refused. So
 *     HAL_CAP_KERNELS and HAL_EXT_KERNELS (1.2) mean nothing from a 1.0 or
 *     1.1 plugin. Bits no minor defines yet are ignored likewise.
 *
 * ---------------------------------------------------------------------------
 * Statuses and errors
 * ---------------------------------------------------------------------------
 * Every entry returns hal_status_t: 0 is success, HAL_IN_PROGRESS (positive)
 * is "not finished yet" and is returned only by hal_coll_test_fn and
 * hal_coll_wait_fn, and every negative value is one of the HAL_ERR_* codes
 * below. A plugin never returns any other value; the host treats one as a
 * plugin bug (HAL_ERR_INTERNAL) and says so. After a failing call, the
 * plugin's get_last_error() returns a message for the calling thread.
 *
 * ---------------------------------------------------------------------------
 * Threads and ownership
 * ---------------------------------------------------------------------------
 * Each entry states, in the same words:
 *   "Thread-safety: any thread, concurrently."  -- may be called from any
 *       number of threads at once, on the same or different objects.
 *   "Thread-safety: any thread, not concurrently on the same X."  -- the host
 *       serialises calls that name the same object X.
 *   "Blocks: no." / "Blocks: up to <bound>."
 * Memory a plugin returns (strings, tables) stays owned by the plugin and is
 * valid until the last hal_finalize_fn unless the entry says otherwise.
 * Memory the host passes in stays owned by the host; a plugin keeps no pointer
 * to it after the call returns unless the entry says so (collective buffers
 * are the exception: see hal_coll_post_fn).
 * Callbacks the host gives (hal_bootstrap_t) may be called from any plugin
 * thread, including the plugin's own worker threads; the host makes them
 * thread-safe.
 */
#ifndef SIGMA_HAL_H_
#define SIGMA_HAL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/* Version, export and helpers                                               */
/* ------------------------------------------------------------------------- */

#define HAL_ABI_MAJOR 1
#define HAL_ABI_MINOR 3

/* The one symbol a plugin exports, as a string for dlsym(). */
#define HAL_GET_API_V1_SYMBOL "hal_get_api_v1"

#if defined(_WIN32)
#define HAL_EXPORT __declspec(dllexport)
#else
#define HAL_EXPORT __attribute__((visibility("default")))
#endif

/* Compile-time check that works in C99 (array of negative size) and C++. */
#if defined(__cplusplus)
#define HAL_STATIC_ASSERT(cond, name) static_assert(cond, #name)
#else
#define HAL_STATIC_ASSERT(cond, name) typedef char hal_static_assert_##name[(cond) ? 1 : -1]
#endif

/*
 * HAL_HAS_FIELD(ptr, type, field): true when the struct *ptr, whose writer put
 * its size in ptr->struct_size, is large enough to hold `field`. For a
 * function pointer also check it for NULL before calling it.
 */
#define HAL_HAS_FIELD(ptr, type, field) \
  ((ptr) != NULL && (uint64_t)(offsetof(type, field) + sizeof(((type*)0)->field)) <= (ptr)->struct_size)

/* ------------------------------------------------------------------------- */
/* Status codes                                                              */
/* ------------------------------------------------------------------------- */

typedef int32_t hal_status_t;

enum hal_status_e {
  HAL_OK = 0,
  /* The operation has not finished yet (hal_coll_test_fn, hal_coll_wait_fn only). */
  HAL_IN_PROGRESS = 1,
  /* An argument is NULL where it may not be, out of range, or a struct_size is
   * smaller than the 1.0 size. Nothing was changed. */
  HAL_ERR_INVALID_ARGUMENT = -1,
  /* This plugin or device does not offer this operation, dtype or field. */
  HAL_ERR_NOT_SUPPORTED = -2,
  /* A resource is not available right now (no device present, driver not
   * loaded, a peer not reachable yet). Retrying later may succeed. */
  HAL_ERR_UNAVAILABLE = -3,
  /* The device stopped working. Every later call naming it may fail too. */
  HAL_ERR_DEVICE_LOST = -4,
  /* A bounded wait ran out. Nothing was cancelled. */
  HAL_ERR_TIMEOUT = -5,
  /* The communicator was aborted (hal_coll_comm_abort_fn). */
  HAL_ERR_ABORTED = -6,
  /* A peer failed or went away during a collective operation. */
  HAL_ERR_REMOTE_ERROR = -7,
  /* An allocation failed, on the device or in the host. */
  HAL_ERR_OUT_OF_MEMORY = -8,
  /* A bug or an unexpected state inside the plugin. */
  HAL_ERR_INTERNAL = -9
};

/* The most negative status a 1.0 plugin may return. */
#define HAL_ERR_MIN_V1 (-9)

/* ------------------------------------------------------------------------- */
/* Data types and operations                                                 */
/* ------------------------------------------------------------------------- */

typedef uint32_t hal_dtype_t;
enum hal_dtype_e {
  HAL_DTYPE_F32 = 0,
  HAL_DTYPE_F16 = 1, /* IEEE 754 binary16 */
  HAL_DTYPE_BF16 = 2,
  HAL_DTYPE_F64 = 3,
  HAL_DTYPE_I32 = 4,
  HAL_DTYPE_I64 = 5,
  HAL_DTYPE_U8 = 6,
  HAL_DTYPE_COUNT_V1 = 7
};
/* Room in per-dtype arrays (hal_device_props_t.peak_flops): new dtypes fit. */
#define HAL_DTYPE_SLOTS 16

typedef uint32_t hal_reduce_op_t;
enum hal_reduce_op_e {
  HAL_REDUCE_SUM = 0,
  HAL_REDUCE_PROD = 1,
  HAL_REDUCE_MIN = 2,
  HAL_REDUCE_MAX = 3,
  /* Sum divided by the world size. Integer dtypes divide with truncation
   * toward zero; u8 sums saturate at no point (they wrap modulo 256 before the
   * division, as the element type does). */
  HAL_REDUCE_AVG = 4,
  HAL_REDUCE_COUNT_V1 = 5
};

typedef uint32_t hal_coll_op_t;
enum hal_coll_op_e {
  HAL_COLL_ALL_REDUCE = 0,     /* count elements in, count out */
  HAL_COLL_ALL_GATHER = 1,     /* count in, count * world out, rank-major */
  HAL_COLL_REDUCE_SCATTER = 2, /* count * world in, count out (block `rank`) */
  HAL_COLL_ALL_TO_ALL = 3,     /* count * world in and out; block j goes to rank j */
  HAL_COLL_ALL_TO_ALLV = 4,    /* counts and displacements per peer */
  HAL_COLL_BROADCAST = 5,      /* count from `root` to everyone */
  HAL_COLL_BARRIER = 6,        /* no data */
  HAL_COLL_SEND = 7,           /* count to `peer` */
  HAL_COLL_RECV = 8,           /* count from `peer` */
  HAL_COLL_OP_COUNT_V1 = 9
};

/* ------------------------------------------------------------------------- */
/* Opaque handles (owned by the plugin)                                      */
/* ------------------------------------------------------------------------- */

typedef struct hal_stream_s* hal_stream_t;   /* an ordered queue of device work */
typedef struct hal_comm_s* hal_comm_t;       /* a communicator over some ranks */
typedef struct hal_request_s* hal_request_t; /* one posted collective operation */

/* ------------------------------------------------------------------------- */
/* Extension chain                                                           */
/* ------------------------------------------------------------------------- */

typedef uint32_t hal_ext_type_t;
enum hal_ext_type_e {
  HAL_EXT_FAULT_INJECTION = 1,
  HAL_EXT_KERNELS = 2 /* ABI 1.2; entries take args structs from 1.3 */
  /* Vendor-private extensions use types at or above 0x80000000. */
};

/*
 * The header every extension starts with. The chain is a NULL-terminated
 * singly linked list owned by the plugin; it is immutable after
 * hal_get_api_v1 returns. A host skips types it does not know.
 */
typedef struct hal_ext_header_t {
  uint64_t struct_size; /* of the whole extension struct */
  hal_ext_type_t type;
  uint32_t reserved; /* zero */
  const struct hal_ext_header_t* next;
} hal_ext_header_t;

/* ------------------------------------------------------------------------- */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------- */

typedef struct hal_init_args_t {
  uint64_t struct_size;
  /* [in, optional] A vendor-specific configuration string, "key=value;..."
   * (e.g. the sim vendor's scenario file). NULL or "" for defaults. Only read
   * during the call. */
  const char* options;
  /* [in, optional] The job directory the host uses for this process (scratch
   * files, logs). NULL when none. Only read during the call. */
  const char* job_dir;
} hal_init_args_t;

/*
 * REQUIRED. Initialises the plugin. Reference-counted: the first call does the
 * work, each further call only counts; every successful call is matched by
 * one hal_finalize_fn. A later call's args are ignored.
 * [in] args: may not be NULL; struct_size >= 1.0 size.
 * Errors: INVALID_ARGUMENT (args bad), UNAVAILABLE (no driver or device: the
 * message says which call failed and why), OUT_OF_MEMORY, INTERNAL.
 * Thread-safety: any thread, concurrently. Blocks: up to the driver's start-up.
 */
typedef hal_status_t hal_init_fn(const hal_init_args_t* args);

/*
 * REQUIRED. Drops one reference. The last one aborts every communicator still
 * alive (their requests complete with HAL_ERR_ABORTED), frees every request,
 * stream and allocation the host left behind, joins the plugin's threads and
 * leaves the plugin as if freshly loaded: a later hal_init_fn works, and the
 * shared object may be unloaded. Every handle becomes invalid.
 * Errors: INVALID_ARGUMENT when the plugin is not initialised.
 * Thread-safety: any thread, not concurrently with any other call of this
 * plugin once the count reaches zero. Blocks: until the plugin's threads end.
 */
typedef hal_status_t hal_finalize_fn(void);

/*
 * REQUIRED. The message of the last failing call made on the calling thread,
 * or "" when there is none. Never NULL. The string is owned by the plugin and
 * valid until the calling thread's next call into the plugin.
 * Thread-safety: any thread, concurrently (each thread sees its own).
 * Blocks: no.
 */
typedef const char* hal_get_last_error_fn(void);

/* ------------------------------------------------------------------------- */
/* Device and memory                                                         */
/* ------------------------------------------------------------------------- */

typedef uint32_t hal_memory_kind_t;
enum hal_memory_kind_e {
  HAL_MEMORY_HOST = 0,  /* device pointers are ordinary host pointers, and any host
                           pointer may be given where device memory is taken */
  HAL_MEMORY_DEVICE = 1 /* device pointers are not host-addressable */
};

typedef struct hal_device_props_t {
  uint64_t struct_size; /* [in] set by the host before the call */
  char name[64];        /* NUL-terminated, e.g. "cpu0" */
  char uuid[40];        /* NUL-terminated, stable across processes; may be "" */
  hal_memory_kind_t memory_kind;
  uint32_t reserved0;       /* zero */
  uint64_t memory_bytes;    /* total device memory */
  uint64_t alignment_bytes; /* what hal_mem_alloc_fn guarantees at least */
  /* Peak dense throughput in FLOP/s for each dtype (index = hal_dtype_t),
   * 0 where unknown or not computable. MFU is computed against these. */
  double peak_flops[HAL_DTYPE_SLOTS];
  /* Peak memory bandwidth in bytes/s, 0 when unknown. */
  double peak_memory_bandwidth;
} hal_device_props_t;

typedef uint32_t hal_copy_kind_t;
enum hal_copy_kind_e {
  HAL_COPY_HOST_TO_DEVICE = 0,
  HAL_COPY_DEVICE_TO_HOST = 1,
  HAL_COPY_DEVICE_TO_DEVICE = 2
};

typedef struct hal_self_test_result_t {
  uint64_t struct_size; /* [in] set by the host */
  uint32_t passed;      /* 1 when every part passed */
  uint32_t reserved0;
  double gemm_max_rel_error;      /* GEMM vs a host reference; <0 if not run */
  uint64_t memory_pattern_errors; /* words that read back wrong */
  uint64_t memory_bytes_tested;
  double copy_bandwidth; /* bytes/s, device-to-device; 0 if not run */
  double duration_s;
  char message[256]; /* NUL-terminated summary, e.g. what failed */
} hal_self_test_result_t;

/*
 * REQUIRED. Number of devices this process may use.
 * [out] count: may not be NULL.
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
typedef hal_status_t hal_device_get_count_fn(uint32_t* count);

/*
 * REQUIRED. Properties of device `device` (0 <= device < count).
 * [in,out] props: the host sets props->struct_size; the plugin fills every
 * field that fits and leaves struct_size as it was.
 * Errors: INVALID_ARGUMENT (bad index, NULL, struct_size too small),
 * DEVICE_LOST.
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
typedef hal_status_t hal_device_get_props_fn(uint32_t device, hal_device_props_t* props);

/*
 * REQUIRED. Allocates `size_bytes` of device memory aligned to at least
 * `alignment_bytes` (0 = the device's default; otherwise a power of two).
 * A size of 0 returns a unique non-NULL pointer that must still be freed.
 * [out] ptr: owned by the host until hal_mem_free_fn; a device address.
 * Errors: INVALID_ARGUMENT, OUT_OF_MEMORY, DEVICE_LOST.
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
typedef hal_status_t hal_mem_alloc_fn(uint32_t device, uint64_t size_bytes, uint64_t alignment_bytes,
                                      void** ptr);

/*
 * REQUIRED. Frees memory from hal_mem_alloc_fn. NULL is accepted and ignored.
 * The host guarantees no posted operation still uses it.
 * Errors: INVALID_ARGUMENT (a pointer this plugin did not allocate, when the
 * plugin can tell).
 * Thread-safety: any thread, not concurrently on the same pointer. Blocks: no.
 */
typedef hal_status_t hal_mem_free_fn(uint32_t device, void* ptr);

/*
 * REQUIRED. Copies `size_bytes` between host and device memory. With stream
 * NULL the copy is complete when the call returns; otherwise it is ordered on
 * the stream and the buffers must stay valid until the stream is synchronised.
 * Errors: INVALID_ARGUMENT, DEVICE_LOST.
 * Thread-safety: any thread, concurrently. Blocks: until done when stream is NULL.
 */
typedef hal_status_t hal_memcpy_fn(uint32_t device, void* dst, const void* src, uint64_t size_bytes,
                                   hal_copy_kind_t kind, hal_stream_t stream);

/*
 * OPTIONAL (all three together). Streams. A plugin without streams leaves them
 * NULL and the host passes stream = NULL everywhere.
 * stream_create: [out] stream owned by the host until stream_destroy.
 * stream_synchronize: blocks until all work queued on the stream finished.
 * stream_destroy: waits for queued work, then frees.
 * Thread-safety: any thread, not concurrently on the same stream.
 */
typedef hal_status_t hal_stream_create_fn(uint32_t device, hal_stream_t* stream);
typedef hal_status_t hal_stream_synchronize_fn(hal_stream_t stream);
typedef hal_status_t hal_stream_destroy_fn(hal_stream_t stream);

/*
 * REQUIRED. A short on-device validation the scheduler runs before it admits
 * a device: a GEMM against a host reference, a memory pattern test over at
 * most `budget_bytes` (0 = the plugin's default, small), and a copy bandwidth
 * measurement. Returns HAL_OK when the test RAN, whatever its verdict: the
 * verdict is result->passed, with figures.
 * [in,out] result: the host sets struct_size; the plugin fills it.
 * Errors: INVALID_ARGUMENT, DEVICE_LOST (the device died while testing).
 * Thread-safety: any thread, not concurrently on the same device.
 * Blocks: up to a few seconds.
 */
typedef hal_status_t hal_device_self_test_fn(uint32_t device, uint64_t budget_bytes,
                                             hal_self_test_result_t* result);

typedef struct hal_device_api_t {
  uint64_t struct_size;
  hal_device_get_count_fn* get_count;            /* REQUIRED */
  hal_device_get_props_fn* get_props;            /* REQUIRED */
  hal_mem_alloc_fn* mem_alloc;                   /* REQUIRED */
  hal_mem_free_fn* mem_free;                     /* REQUIRED */
  hal_memcpy_fn* memcpy;                         /* REQUIRED */
  hal_stream_create_fn* stream_create;           /* OPTIONAL */
  hal_stream_synchronize_fn* stream_synchronize; /* OPTIONAL */
  hal_stream_destroy_fn* stream_destroy;         /* OPTIONAL */
  hal_device_self_test_fn* self_test;            /* REQUIRED */
} hal_device_api_t;

/* ------------------------------------------------------------------------- */
/* Telemetry                                                                 */
/* ------------------------------------------------------------------------- */

typedef uint32_t hal_field_id_t;
enum hal_field_id_e {
  HAL_FIELD_TEMPERATURE_C = 1,      /* f64, degrees Celsius, hottest sensor */
  HAL_FIELD_POWER_W = 2,            /* f64, watts */
  HAL_FIELD_ENERGY_J = 3,           /* f64, joules, MONOTONIC */
  HAL_FIELD_CLOCK_COMPUTE_MHZ = 4,  /* f64 */
  HAL_FIELD_CLOCK_MEMORY_MHZ = 5,   /* f64 */
  HAL_FIELD_UTILIZATION_PCT = 6,    /* f64, 0..100 */
  HAL_FIELD_MEMORY_USED_BYTES = 7,  /* u64 */
  HAL_FIELD_MEMORY_TOTAL_BYTES = 8, /* u64 */
  HAL_FIELD_ECC_CORRECTABLE = 9,    /* u64, MONOTONIC */
  HAL_FIELD_ECC_UNCORRECTABLE = 10, /* u64, MONOTONIC */
  HAL_FIELD_LINK_ERRORS = 11,       /* u64, MONOTONIC, all links */
  HAL_FIELD_LINK_RETRIES = 12,      /* u64, MONOTONIC, all links */
  HAL_FIELD_THROTTLE_REASONS = 13,  /* u64, bit mask of HAL_THROTTLE_* */
  HAL_FIELD_FATAL_CODE = 14,        /* i64, last fatal (XID-like) code, 0 none */
  HAL_FIELD_RETIRED_PAGES = 15,     /* u64, MONOTONIC */
  HAL_FIELD_STANDARD_COUNT_V1 = 16  /* one past the last standard id of 1.0 */
};
/* Ids at or above this are the vendor's own; list_fields gives their names. */
#define HAL_FIELD_VENDOR_FIRST 0x80000000u

/* Bits of HAL_FIELD_THROTTLE_REASONS. */
#define HAL_THROTTLE_THERMAL (UINT64_C(1) << 0)
#define HAL_THROTTLE_POWER (UINT64_C(1) << 1)
#define HAL_THROTTLE_RELIABILITY (UINT64_C(1) << 2)
#define HAL_THROTTLE_OTHER (UINT64_C(1) << 63)

typedef uint32_t hal_value_type_t;
enum hal_value_type_e { HAL_VALUE_F64 = 0, HAL_VALUE_I64 = 1, HAL_VALUE_U64 = 2 };

/* Bits of hal_field_info_t.flags. */
#define HAL_FIELD_FLAG_MONOTONIC (1u << 0) /* never decreases while the plugin is loaded */

typedef struct hal_field_info_t {
  hal_field_id_t id;
  hal_value_type_t type;
  uint32_t flags;    /* HAL_FIELD_FLAG_* */
  uint32_t reserved; /* zero */
  char name[48];     /* NUL-terminated, e.g. "temperature" or "vendor.hbm_temp" */
  char unit[16];     /* NUL-terminated, e.g. "C", "W", "J", "count", "" */
} hal_field_info_t;

typedef union hal_value_t {
  double f64;
  int64_t i64;
  uint64_t u64;
} hal_value_t;

/* The most fields a device may list (ABI 1.2 states the bound hosts apply). */
#define HAL_MAX_TELEMETRY_FIELDS 4096u

typedef struct hal_telemetry_sample_t {
  hal_field_id_t id;     /* [out] copied from the request */
  hal_status_t status;   /* [out] HAL_OK, or why this field has no value */
  uint64_t timestamp_ns; /* [out] CLOCK_MONOTONIC time of the reading; 0 if none */
  hal_value_type_t type; /* [out] as listed */
  uint32_t reserved;     /* zero */
  hal_value_t value;     /* [out] valid when status == HAL_OK */
} hal_telemetry_sample_t;

/*
 * REQUIRED. Lists the fields device `device` offers. Two-call pattern: with
 * fields NULL or capacity too small, sets *count to the number available and
 * copies min(capacity, count) entries. The list is fixed for the plugin's
 * lifetime. Fields the hardware of this machine lacks may be listed; reading
 * them yields a per-field HAL_ERR_NOT_SUPPORTED, never an invented number.
 * [out] fields: host-owned array of `capacity` entries, may be NULL.
 * [out] count: may not be NULL.
 * Errors: INVALID_ARGUMENT, DEVICE_LOST.
 * Thread-safety: any thread, concurrently. Blocks: no.
 * At most HAL_MAX_TELEMETRY_FIELDS fields: the host refuses a larger count.
 */
typedef hal_status_t hal_telemetry_list_fields_fn(uint32_t device, hal_field_info_t* fields,
                                                  uint32_t capacity, uint32_t* count);

/*
 * REQUIRED. Reads `n` fields. The call returns HAL_OK when every sample was
 * filled, each with its own status: an unknown id gives NOT_SUPPORTED in its
 * sample, a sensor that failed gives UNAVAILABLE, a lost device DEVICE_LOST.
 * The call itself fails only for bad arguments.
 * [in] ids: host-owned array of n ids. [out] samples: host-owned array of n.
 * Thread-safety: any thread, concurrently. Blocks: up to a few milliseconds.
 */
typedef hal_status_t hal_telemetry_read_fn(uint32_t device, const hal_field_id_t* ids, uint32_t n,
                                           hal_telemetry_sample_t* samples);

typedef struct hal_telemetry_api_t {
  uint64_t struct_size;
  hal_telemetry_list_fields_fn* list_fields; /* REQUIRED */
  hal_telemetry_read_fn* read;               /* REQUIRED */
} hal_telemetry_api_t;

/* ------------------------------------------------------------------------- */
/* Collectives                                                               */
/* ------------------------------------------------------------------------- */

/*
 * The host's out-of-band channel, through which ranks find each other when a
 * communicator is created: a key-value store shared by every rank of the job
 * (a file store in the job directory on one host, Redis across hosts). Keys
 * are NUL-terminated strings of 1 to HAL_BOOTSTRAP_MAX_KEY_BYTES (1024)
 * bytes, any byte but NUL ('/', '.', spaces and bytes above 127 included);
 * the host scopes them to the communicator, so a plugin may use short fixed
 * names. An empty or longer key is INVALID_ARGUMENT from both callbacks,
 * and every other key works on every store. Values are opaque bytes, at
 * most HAL_BOOTSTRAP_MAX_VALUE_BYTES (1 MiB).
 * Every callback may be called from any thread, concurrently, and only
 * between hal_coll_comm_create_fn's start and hal_coll_comm_destroy_fn's
 * return. The struct and ctx are owned by the host and stay valid that long.
 */
/* The bootstrap's limits (ABI 1.2 writes them down; they held since 1.0). */
enum hal_bootstrap_limits_e { HAL_BOOTSTRAP_MAX_KEY_BYTES = 1024, HAL_BOOTSTRAP_MAX_VALUE_BYTES = 1048576 };

typedef struct hal_bootstrap_t {
  uint64_t struct_size;
  void* ctx; /* passed back to every callback */
  /* Stores `size` bytes under `key`, replacing any previous value. */
  hal_status_t (*kv_set)(void* ctx, const char* key, const void* value, uint64_t size);
  /* Waits until `key` exists (at most timeout_ns), then copies up to
   * `capacity` bytes to value and sets *size to the value's full size.
   * Errors: TIMEOUT, INVALID_ARGUMENT, UNAVAILABLE (the store is gone). */
  hal_status_t (*kv_get)(void* ctx, const char* key, void* value, uint64_t capacity, uint64_t* size,
                         uint64_t timeout_ns);
  /* A URI naming the store ("file:///dir" or "redis://host:port/prefix"), for
   * plugins whose transport library has its own client for that store. The
   * callbacks above always work; the URI is a hint. May be "". A plugin
   * that waits through its own client still asks kv_get now and then: the
   * host cancels a creation it gave up on (an abort) by having kv_get answer
   * ABORTED, and the creation should then end within about a second. */
  const char* store_uri;
  /* A prefix unique to this communicator in that store; the callbacks already
   * apply it. */
  const char* key_prefix;
} hal_bootstrap_t;

typedef struct hal_comm_create_args_t {
  uint64_t struct_size;
  uint32_t device;                  /* local device index */
  uint32_t rank;                    /* 0 <= rank < world_size */
  uint32_t world_size;              /* >= 1 */
  uint32_t reserved0;               /* zero */
  const hal_bootstrap_t* bootstrap; /* may be NULL only when world_size == 1 */
  uint64_t timeout_ns;              /* how long creation may wait for the other ranks */
} hal_comm_create_args_t;

typedef struct hal_coll_args_t {
  uint64_t struct_size;
  hal_coll_op_t op;
  hal_dtype_t dtype;
  hal_reduce_op_t reduce_op; /* reducing ops only */
  uint32_t root;             /* broadcast only */
  uint32_t peer;             /* send/recv only */
  uint32_t reserved0;        /* zero */
  uint64_t count;            /* elements, see hal_coll_op_e; may be 0 */
  /* Device memory. In place (NCCL's convention): ALL_REDUCE and BROADCAST
   * with sendbuf == recvbuf; ALL_GATHER with sendbuf == recvbuf + rank *
   * count elements; REDUCE_SCATTER with recvbuf == sendbuf + rank * count
   * elements. ALL_TO_ALL and ALL_TO_ALLV may not run in place. Otherwise the
   * two ranges must not overlap. */
  const void* sendbuf;
  void* recvbuf;
  /* ALL_TO_ALLV only: host arrays of world_size entries, in elements. Rank i's
   * block j (sendbuf + send_displs[j], send_counts[j] elements) goes to rank
   * j, landing at recvbuf + recv_displs[i] on rank j; recv_counts[i] there
   * must equal send_counts[j] here. In place is not allowed. */
  const uint64_t* send_counts;
  const uint64_t* send_displs;
  const uint64_t* recv_counts;
  const uint64_t* recv_displs;
} hal_coll_args_t;

/*
 * REQUIRED. Creates a communicator. Collective: every rank of the world calls
 * it with the same world_size and its own rank, each through the bootstrap.
 * [out] comm: owned by the host until hal_coll_comm_destroy_fn.
 * Errors: INVALID_ARGUMENT, NOT_SUPPORTED (this world size, e.g. a plugin
 * that is single-rank only), TIMEOUT (some rank did not arrive within
 * timeout_ns), UNAVAILABLE, OUT_OF_MEMORY.
 * Thread-safety: any thread, concurrently. Blocks: up to timeout_ns.
 */
typedef hal_status_t hal_coll_comm_create_fn(const hal_comm_create_args_t* args, hal_comm_t* comm);

/*
 * REQUIRED. Destroys a communicator. Requests still in flight are aborted
 * first; the host must still free them (before or after). Blocks until the
 * plugin's threads for this communicator have stopped.
 * Thread-safety: any thread, not concurrently on the same comm.
 */
typedef hal_status_t hal_coll_comm_destroy_fn(hal_comm_t comm);

/*
 * REQUIRED. Aborts a communicator: every pending and every later operation on
 * it completes with HAL_ERR_ABORTED within a bounded time (a hung peer must not
 * keep it blocked), and its asynchronous error becomes ABORTED. The
 * communicator can then only be destroyed; the process can create new ones.
 * Idempotent.
 * Thread-safety: any thread, concurrently -- including while another thread is
 * blocked in hal_coll_wait_fn on this comm. Blocks: no longer than ~1 s.
 */
typedef hal_status_t hal_coll_comm_abort_fn(hal_comm_t comm);

/*
 * REQUIRED. The first error the communicator met asynchronously (a peer's
 * failure, a transport error, an abort), or HAL_OK.
 * [out] error: may not be NULL.
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
typedef hal_status_t hal_coll_comm_get_async_error_fn(hal_comm_t comm, hal_status_t* error);

/*
 * REQUIRED. Posts one collective or point-to-point operation and returns at
 * once. Operations posted on one communicator run in posting order; every
 * rank must post the same sequence (send/recv pair with the peer's recv/send).
 * The buffers and, for ALL_TO_ALLV, the count arrays must stay valid and
 * unchanged until the request completes (test/wait return something other
 * than HAL_IN_PROGRESS). With a stream, the operation is ordered after the
 * work already queued there.
 * [in] args: read during the call only (the count arrays excepted).
 * [out] request: owned by the host until hal_coll_request_free_fn.
 * Errors (of the post itself): INVALID_ARGUMENT (bad op, dtype, reduce op,
 * root or peer, NULL buffers with count > 0, ALL_TO_ALL(V) in place),
 * NOT_SUPPORTED, ABORTED (comm aborted), DEVICE_LOST. Errors while running
 * come back from test/wait.
 * Thread-safety: any thread, not concurrently on the same comm. Blocks: no.
 */
typedef hal_status_t hal_coll_post_fn(hal_comm_t comm, const hal_coll_args_t* args, hal_stream_t stream,
                                      hal_request_t* request);

/*
 * REQUIRED. Polls a request: HAL_OK when it finished well, HAL_IN_PROGRESS,
 * or the error it finished with (TIMEOUT never: that is wait's).
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
typedef hal_status_t hal_coll_test_fn(hal_request_t request);

/*
 * REQUIRED. Waits at most timeout_ns for a request. Returns HAL_OK or the
 * error it finished with; HAL_ERR_TIMEOUT when time ran out (the request is
 * unchanged and may be waited on again). timeout_ns == 0 is a poll
 * (HAL_IN_PROGRESS when unfinished); UINT64_MAX waits for ever. Returns early
 * with HAL_ERR_ABORTED when the comm is aborted from another thread.
 * Thread-safety: any thread, concurrently. Blocks: up to timeout_ns.
 */
typedef hal_status_t hal_coll_wait_fn(hal_request_t request, uint64_t timeout_ns);

/*
 * REQUIRED. Frees a request. A finished request may always be freed. An
 * unfinished one may be freed only once its communicator was aborted or
 * destroyed; otherwise the call returns INVALID_ARGUMENT and the request stays.
 * Thread-safety: any thread, not concurrently on the same request. Blocks: no.
 */
typedef hal_status_t hal_coll_request_free_fn(hal_request_t request);

/*
 * OPTIONAL (ABI 1.1; NULL or absent: the host posts and waits). Runs one
 * operation to completion before returning: what hal_coll_post_fn followed by
 * hal_coll_wait_fn(timeout_ns) does, except that an operation still running
 * when the time is up is not left behind: the communicator is aborted (as by
 * hal_coll_comm_abort_fn) and the call returns HAL_ERR_TIMEOUT. A plugin whose
 * transport blocks anyway (sockets, Gloo) runs the operation on the calling
 * thread when nothing posted earlier is still queued, which saves the two
 * thread hand-offs that dominate a small message's latency; otherwise it
 * queues it behind the earlier ones, in posting order, and waits.
 * [in] args: as for hal_coll_post_fn; the buffers are the plugin's until the
 * call returns.
 * Errors: those of hal_coll_post_fn, those hal_coll_wait_fn returns for a
 * finished operation, and TIMEOUT (the communicator is then aborted).
 * Thread-safety: as hal_coll_post_fn (any thread, not concurrently with post
 * or run on the same comm). hal_coll_comm_abort_fn from another thread ends
 * the call within ~1 s with HAL_ERR_ABORTED. Blocks: up to timeout_ns, plus
 * the bounded abort when it runs out.
 */
typedef hal_status_t hal_coll_run_fn(hal_comm_t comm, const hal_coll_args_t* args, hal_stream_t stream,
                                     uint64_t timeout_ns);

typedef struct hal_coll_api_t {
  uint64_t struct_size;
  hal_coll_comm_create_fn* comm_create;                   /* REQUIRED */
  hal_coll_comm_destroy_fn* comm_destroy;                 /* REQUIRED */
  hal_coll_comm_abort_fn* comm_abort;                     /* REQUIRED */
  hal_coll_comm_get_async_error_fn* comm_get_async_error; /* REQUIRED */
  hal_coll_post_fn* post;                                 /* REQUIRED */
  hal_coll_test_fn* test;                                 /* REQUIRED */
  hal_coll_wait_fn* wait;                                 /* REQUIRED */
  hal_coll_request_free_fn* request_free;                 /* REQUIRED */
  hal_coll_run_fn* run;                                   /* OPTIONAL, ABI 1.1 */
} hal_coll_api_t;

/* ------------------------------------------------------------------------- */
/* Extension: fault injection (HAL_EXT_FAULT_INJECTION)                      */
/* ------------------------------------------------------------------------- */

typedef uint32_t hal_fault_kind_t;
enum hal_fault_kind_e {
  /* Every later call naming the device fails with DEVICE_LOST. */
  HAL_FAULT_DEVICE_LOST = 0,
  /* The next collective on the device's communicators never completes until
   * the communicator is aborted. */
  HAL_FAULT_HANG = 1,
  /* Collectives take `factor` times as long (a slow link). */
  HAL_FAULT_SLOW_LINK = 2,
  /* The next collective's result on this rank has one element corrupted, with
   * no error reported (silent data corruption). */
  HAL_FAULT_CORRUPT_RESULT = 3,
  /* Telemetry field `field` reads `value` (f64) for duration_ns. */
  HAL_FAULT_TELEMETRY_EXCURSION = 4,
  /* The process exits at once, as a crashed driver would take it down. */
  HAL_FAULT_CRASH = 5,
  HAL_FAULT_KIND_COUNT_V1 = 6
};

typedef struct hal_fault_spec_t {
  uint64_t struct_size;
  hal_fault_kind_t kind;
  uint32_t device;
  uint64_t after_ops;   /* fire after this many further collectives (0 = now) */
  uint64_t duration_ns; /* 0 = until cleared (where duration applies) */
  double factor;        /* SLOW_LINK */
  hal_field_id_t field; /* TELEMETRY_EXCURSION */
  uint32_t reserved0;
  double value; /* TELEMETRY_EXCURSION */
} hal_fault_spec_t;

/*
 * Injects faults through the real ABI, so tests and the conformance suite can
 * drive a plugin's failure paths. A plugin offers it by chaining this struct.
 * supported_kinds: bit (1 << kind) per kind it implements.
 * inject: arms a fault. Errors: INVALID_ARGUMENT, NOT_SUPPORTED (kind).
 * clear: disarms every fault on the device and makes it usable again, as a
 *   repaired device would be (communicators aborted by a fault stay aborted).
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
typedef struct hal_ext_fault_injection_t {
  hal_ext_header_t header; /* type = HAL_EXT_FAULT_INJECTION */
  uint64_t supported_kinds;
  hal_status_t (*inject)(const hal_fault_spec_t* spec);
  hal_status_t (*clear)(uint32_t device);
} hal_ext_fault_injection_t;

/* ------------------------------------------------------------------------- */
/* Extension: device kernels (HAL_EXT_KERNELS, ABI 1.2; args structs 1.3)   */
/* ------------------------------------------------------------------------- */

/*
 * The kernels libsigma's engines run on buffers in the plugin's device
 * memory (hal_device_props_t.memory_kind == HAL_MEMORY_DEVICE): the gradient
 * scan of the guardrails, the byte shuffle and checksum of checkpoints, the
 * MoE token permutation. A plugin whose device memory the host cannot read
 * offers them here; without this extension (or with an entry NULL) the host
 * copies the buffer to host memory through device->memcpy and runs its CPU
 * kernels: the same results, more traffic.
 *
 * Each entry must give what libsigma's CPU kernel gives for the same bytes
 * (sigma/kernels.hpp defines them): bit for bit for the shuffle, checksum
 * and permutation and the scan's counts and amax; up to the order of
 * floating-point additions for the scan's sum of squares and the
 * unpermute's sums. The conformance suite compares, on odd sizes,
 * misaligned starts, NaN and Inf. Pointers marked [device] are
 * `device`'s memory as mem_alloc returned it, at any offset and alignment;
 * [host] ones are the host's. Every entry returns when its work is done and
 * its outputs are written. Errors: INVALID_ARGUMENT (a dtype or size the
 * kernel does not take), DEVICE_LOST, INTERNAL. NOT_SUPPORTED declines a
 * call the plugin cannot run (the host then stages it, as for a NULL entry).
 * Thread-safety: any thread, concurrently on different buffers.
 */
typedef struct hal_kernel_scan_result_t {
  uint64_t non_finite; /* NaN and +-Inf elements, left out of the two below */
  double sum_squares;  /* accumulated in f64 */
  double amax;         /* the largest |x| over finite elements; 0 for none */
} hal_kernel_scan_result_t;

/* Every entry takes one args struct, written by the host; the plugin reads
 * it during the call only. struct_size is the host's (a plugin refuses one
 * smaller than the 1.3 size with INVALID_ARGUMENT and ignores a tail it does
 * not know); `reserved` fields are zero. */

/* One pass over `count` f32, f16 or bf16 elements at [device] data. */
typedef struct hal_kernel_grad_scan_args_t {
  uint64_t struct_size;
  uint32_t device;
  hal_dtype_t dtype;
  const void* data; /* [device] */
  uint64_t count;
  hal_kernel_scan_result_t* out; /* [host] */
} hal_kernel_grad_scan_args_t;
typedef hal_status_t hal_kernel_grad_scan_fn(const hal_kernel_grad_scan_args_t* args);

/* Byte-plane shuffle of `count` elements of `elem_size` bytes, [device] src
 * to [device] dst, with [device] base XORed in when not NULL (inverse == 0:
 * shuffle(src ^ base); inverse != 0: unshuffle(src) ^ base). */
typedef struct hal_kernel_shuffle_args_t {
  uint64_t struct_size;
  uint32_t device;
  uint32_t elem_size;
  const void* src;  /* [device] */
  const void* base; /* [device], NULL for none */
  void* dst;        /* [device] */
  uint64_t count;
  uint32_t inverse;
  uint32_t reserved;
} hal_kernel_shuffle_args_t;
typedef hal_status_t hal_kernel_shuffle_fn(const hal_kernel_shuffle_args_t* args);

/* The sigma-h64 checksum (sigma/hal_support.h) of `bytes` bytes at [device] data. */
typedef struct hal_kernel_checksum_args_t {
  uint64_t struct_size;
  uint32_t device;
  uint32_t reserved;
  const void* data; /* [device] */
  uint64_t bytes;
  uint64_t* out; /* [host] */
} hal_kernel_checksum_args_t;
typedef hal_status_t hal_kernel_checksum_fn(const hal_kernel_checksum_args_t* args);

/* MoE gather: row row_of[t * top_k + k] of out is row t of tokens (rows of
 * row_bytes; row_of -1 = dropped; all pointers [device]). */
typedef struct hal_kernel_moe_permute_args_t {
  uint64_t struct_size;
  uint32_t device;
  uint32_t top_k;
  const void* tokens;
  uint64_t num_tokens;
  uint64_t row_bytes;
  const int64_t* row_of;
  void* out;
} hal_kernel_moe_permute_args_t;
typedef hal_status_t hal_kernel_moe_permute_fn(const hal_kernel_moe_permute_args_t* args);

/* MoE weighted scatter-add back: row t of out is the sum over k of
 * weights[t * top_k + k] * expert_out[row_of[t * top_k + k]] (f32, f16 or
 * bf16 rows of `hidden` elements, accumulated in f32; all pointers [device]). */
typedef struct hal_kernel_moe_unpermute_args_t {
  uint64_t struct_size;
  uint32_t device;
  uint32_t top_k;
  const void* expert_out;
  const int64_t* row_of;
  const float* weights;
  uint64_t num_tokens;
  uint64_t hidden;
  hal_dtype_t dtype;
  uint32_t reserved;
  void* out;
} hal_kernel_moe_unpermute_args_t;
typedef hal_status_t hal_kernel_moe_unpermute_fn(const hal_kernel_moe_unpermute_args_t* args);

/* What a plugin declaring minor 1.3 or later chains as HAL_EXT_KERNELS. */
typedef struct hal_ext_kernels_t {
  hal_ext_header_t header;                    /* type = HAL_EXT_KERNELS */
  hal_kernel_grad_scan_fn* grad_scan;         /* OPTIONAL */
  hal_kernel_shuffle_fn* shuffle;             /* OPTIONAL */
  hal_kernel_checksum_fn* checksum;           /* OPTIONAL */
  hal_kernel_moe_permute_fn* moe_permute;     /* OPTIONAL */
  hal_kernel_moe_unpermute_fn* moe_unpermute; /* OPTIONAL */
} hal_ext_kernels_t;

/* What a plugin declaring minor 1.2 chains as HAL_EXT_KERNELS: the same
 * entries, positional (sigma/abi/hal_1_2.h). A host reads a 1.2 plugin's
 * extension as this; a new plugin writes hal_ext_kernels_t. */
typedef hal_status_t hal_kernel_grad_scan_v1_2_fn(uint32_t device, const void* data, uint64_t count,
                                                  hal_dtype_t dtype, hal_kernel_scan_result_t* out);
typedef hal_status_t hal_kernel_shuffle_v1_2_fn(uint32_t device, const void* src, const void* base, void* dst,
                                                uint64_t count, uint32_t elem_size, uint32_t inverse);
typedef hal_status_t hal_kernel_checksum_v1_2_fn(uint32_t device, const void* data, uint64_t bytes,
                                                 uint64_t* out);
typedef hal_status_t hal_kernel_moe_permute_v1_2_fn(uint32_t device, const void* tokens, uint64_t num_tokens,
                                                    uint64_t row_bytes, const int64_t* row_of, uint32_t top_k,
                                                    void* out);
typedef hal_status_t hal_kernel_moe_unpermute_v1_2_fn(uint32_t device, const void* expert_out,
                                                      const int64_t* row_of, const float* weights,
                                                      uint64_t num_tokens, uint32_t top_k, uint64_t hidden,
                                                      hal_dtype_t dtype, void* out);
typedef struct hal_ext_kernels_v1_2_t {
  hal_ext_header_t header;
  hal_kernel_grad_scan_v1_2_fn* grad_scan;
  hal_kernel_shuffle_v1_2_fn* shuffle;
  hal_kernel_checksum_v1_2_fn* checksum;
  hal_kernel_moe_permute_v1_2_fn* moe_permute;
  hal_kernel_moe_unpermute_v1_2_fn* moe_unpermute;
} hal_ext_kernels_v1_2_t;

/* ------------------------------------------------------------------------- */
/* The root table                                                            */
/* ------------------------------------------------------------------------- */

/* Bits of hal_api_t.capabilities. */
#define HAL_CAP_MULTI_RANK (UINT64_C(1) << 0) /* communicators with world_size > 1 */
#define HAL_CAP_STREAMS (UINT64_C(1) << 1)    /* the OPTIONAL stream entries are set */
#define HAL_CAP_HOST_MEMORY                                                                      \
  (UINT64_C(1) << 2)                               /* every device's pointers are host pointers; \
                                                      without it, each device's memory_kind says */
#define HAL_CAP_FAULT_INJECTION (UINT64_C(1) << 3) /* HAL_EXT_FAULT_INJECTION is chained */
#define HAL_CAP_KERNELS (UINT64_C(1) << 4)         /* HAL_EXT_KERNELS is chained (ABI 1.2) */

typedef struct hal_api_t {
  uint64_t struct_size;
  uint32_t abi_major;                    /* HAL_ABI_MAJOR the plugin was built against */
  uint32_t abi_minor;                    /* HAL_ABI_MINOR the plugin was built against */
  const char* name;                      /* short name, e.g. "cpu"; never NULL */
  const char* version;                   /* the vendor's version string; never NULL */
  uint64_t capabilities;                 /* HAL_CAP_* */
  const hal_ext_header_t* extensions;    /* OPTIONAL chain, may be NULL */
  hal_init_fn* init;                     /* REQUIRED */
  hal_finalize_fn* finalize;             /* REQUIRED */
  hal_get_last_error_fn* get_last_error; /* REQUIRED */
  const hal_device_api_t* device;        /* REQUIRED */
  const hal_telemetry_api_t* telemetry;  /* REQUIRED */
  const hal_coll_api_t* coll;            /* REQUIRED */
} hal_api_t;

/*
 * The discovery entry a plugin exports (HAL_GET_API_V1_SYMBOL). The host
 * passes the ABI it was built against. The plugin returns its root table,
 * which it owns and which stays valid and unchanged while the shared object
 * is loaded, or NULL when it cannot serve that host major (for ABI 1 plugins:
 * host_major != 1). A host minor newer than the plugin's is fine: the host
 * reads struct_size and treats what is missing as not supported.
 * Thread-safety: any thread, concurrently. Blocks: no. Does not initialise
 * the plugin (see hal_init_fn).
 */
typedef const hal_api_t* hal_get_api_v1_fn(uint32_t host_major, uint32_t host_minor);

/* The sizes of each version's structs, which a reader compares struct_size
 * against: literals, frozen when the version was released (sigma/abi/
 * hal_1_<minor>.h holds each version's declarations). A field appended in a
 * later minor adds that minor's size here and never moves these; the
 * assertions below tie each literal to where its version's last field ends. */
enum hal_v1_sizes_e {
  HAL_API_V1_0_SIZE = 96,
  HAL_DEVICE_API_V1_0_SIZE = 80,
  HAL_TELEMETRY_API_V1_0_SIZE = 24,
  HAL_COLL_API_V1_0_SIZE = 72,
  HAL_INIT_ARGS_V1_0_SIZE = 24,
  HAL_DEVICE_PROPS_V1_0_SIZE = 272,
  HAL_SELF_TEST_RESULT_V1_0_SIZE = 312,
  HAL_BOOTSTRAP_V1_0_SIZE = 48,
  HAL_COMM_CREATE_ARGS_V1_0_SIZE = 40,
  HAL_COLL_ARGS_V1_0_SIZE = 88,
  HAL_FAULT_SPEC_V1_0_SIZE = 56,
  HAL_EXT_FAULT_INJECTION_V1_0_SIZE = 48
};

/* The sizes of the structs that grew in ABI 1.1. */
enum hal_v1_1_sizes_e {
  HAL_COLL_API_V1_1_SIZE = 80 /* + run */
};

/* The sizes of the structs ABI 1.2 added. */
enum hal_v1_2_sizes_e { HAL_EXT_KERNELS_V1_2_SIZE = 64 };

/* The sizes of the structs ABI 1.3 added (the kernels entries' args). */
enum hal_v1_3_sizes_e {
  HAL_EXT_KERNELS_V1_3_SIZE = 64,
  HAL_KERNEL_GRAD_SCAN_ARGS_V1_3_SIZE = 40,
  HAL_KERNEL_SHUFFLE_ARGS_V1_3_SIZE = 56,
  HAL_KERNEL_CHECKSUM_ARGS_V1_3_SIZE = 40,
  HAL_KERNEL_MOE_PERMUTE_ARGS_V1_3_SIZE = 56,
  HAL_KERNEL_MOE_UNPERMUTE_ARGS_V1_3_SIZE = 72
};

/* Each frozen size is where that version's last field ends: the struct's
 * size while nothing was appended, the offset of the first appended field
 * after. Appending a field fails the sizeof assertion of its struct: add the
 * new version's size and assert the old one at the new field's offset. */
HAL_STATIC_ASSERT(sizeof(hal_api_t) == HAL_API_V1_0_SIZE, hal_api_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_device_api_t) == HAL_DEVICE_API_V1_0_SIZE, hal_device_api_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_telemetry_api_t) == HAL_TELEMETRY_API_V1_0_SIZE, hal_telemetry_api_v1_0);
HAL_STATIC_ASSERT(offsetof(hal_coll_api_t, run) == HAL_COLL_API_V1_0_SIZE, hal_coll_api_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_coll_api_t) == HAL_COLL_API_V1_1_SIZE, hal_coll_api_v1_1);
HAL_STATIC_ASSERT(sizeof(hal_init_args_t) == HAL_INIT_ARGS_V1_0_SIZE, hal_init_args_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_device_props_t) == HAL_DEVICE_PROPS_V1_0_SIZE, hal_device_props_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_self_test_result_t) == HAL_SELF_TEST_RESULT_V1_0_SIZE, hal_self_test_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_bootstrap_t) == HAL_BOOTSTRAP_V1_0_SIZE, hal_bootstrap_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_comm_create_args_t) == HAL_COMM_CREATE_ARGS_V1_0_SIZE,
                  hal_comm_create_args_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_coll_args_t) == HAL_COLL_ARGS_V1_0_SIZE, hal_coll_args_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_fault_spec_t) == HAL_FAULT_SPEC_V1_0_SIZE, hal_fault_spec_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_ext_fault_injection_t) == HAL_EXT_FAULT_INJECTION_V1_0_SIZE, hal_ext_fault_v1_0);
HAL_STATIC_ASSERT(sizeof(hal_ext_kernels_v1_2_t) == HAL_EXT_KERNELS_V1_2_SIZE, hal_ext_kernels_v1_2);
HAL_STATIC_ASSERT(sizeof(hal_ext_kernels_t) == HAL_EXT_KERNELS_V1_3_SIZE, hal_ext_kernels_v1_3);
HAL_STATIC_ASSERT(sizeof(hal_kernel_grad_scan_args_t) == HAL_KERNEL_GRAD_SCAN_ARGS_V1_3_SIZE,
                  hal_kernel_grad_scan_args_v1_3);
HAL_STATIC_ASSERT(sizeof(hal_kernel_shuffle_args_t) == HAL_KERNEL_SHUFFLE_ARGS_V1_3_SIZE,
                  hal_kernel_shuffle_args_v1_3);
HAL_STATIC_ASSERT(sizeof(hal_kernel_checksum_args_t) == HAL_KERNEL_CHECKSUM_ARGS_V1_3_SIZE,
                  hal_kernel_checksum_args_v1_3);
HAL_STATIC_ASSERT(sizeof(hal_kernel_moe_permute_args_t) == HAL_KERNEL_MOE_PERMUTE_ARGS_V1_3_SIZE,
                  hal_kernel_moe_permute_args_v1_3);
HAL_STATIC_ASSERT(sizeof(hal_kernel_moe_unpermute_args_t) == HAL_KERNEL_MOE_UNPERMUTE_ARGS_V1_3_SIZE,
                  hal_kernel_moe_unpermute_args_v1_3);

/* Layout guards: these must hold on every 64-bit platform we support. If one
 * fails, a field was inserted in the middle: append it at the end instead. */
HAL_STATIC_ASSERT(sizeof(void*) == 8, hal_needs_64_bit_pointers);
HAL_STATIC_ASSERT(sizeof(hal_telemetry_sample_t) == 32, hal_sample_layout);
HAL_STATIC_ASSERT(sizeof(hal_field_info_t) == 80, hal_field_info_layout);
HAL_STATIC_ASSERT(sizeof(hal_coll_args_t) == 88, hal_coll_args_layout);
HAL_STATIC_ASSERT(sizeof(hal_api_t) == 96, hal_api_layout);
HAL_STATIC_ASSERT(sizeof(hal_coll_api_t) == 80, hal_coll_api_layout);
HAL_STATIC_ASSERT(sizeof(hal_device_props_t) == 272, hal_device_props_layout);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SIGMA_HAL_H_ */
