/*
 * The plugin the loader's fuzz target loads: the skeleton, except that the
 * root table hal_get_api_v1 returns is rebuilt from the fuzzer's bytes
 * (sigma_fuzz_set_table) before every load. The bytes choose the major and
 * minor, every struct_size, which entries are NULL, which answers the
 * device and telemetry entries give (undefined statuses, huge counts,
 * listings past the capacity, NaN readings) and whether get_last_error
 * answers NULL or a long message. Every non-NULL pointer stays a real
 * function: what the loader is fuzzed on is what a plugin says, not a jump
 * into garbage (that no host can survive in-process).
 */
#define hal_get_api_v1 skeleton_inner_get_api_v1
#include "skeleton.c"
#undef hal_get_api_v1

static uint8_t g_bytes[64];
static hal_api_t g_api;
static hal_device_api_t g_device;
static hal_coll_api_t g_coll;
static hal_telemetry_api_t g_telemetry;
static const hal_api_t* g_inner;

HAL_EXPORT void sigma_fuzz_set_table(const uint8_t* data, size_t size) {
  memset(g_bytes, 0, sizeof g_bytes);
  memcpy(g_bytes, data, size < sizeof g_bytes ? size : sizeof g_bytes);
}

static uint8_t byte_at(size_t i) { return g_bytes[i % sizeof g_bytes]; }
static int bit(size_t i) { return (byte_at(i / 8) >> (i % 8)) & 1; }

/* A status the byte picks: one ABI 1 defines, or one it does not. */
static hal_status_t status_of(uint8_t b) {
  static const hal_status_t s[] = {
      HAL_OK,           HAL_OK, HAL_OK, HAL_ERR_INVALID_ARGUMENT, HAL_ERR_UNAVAILABLE,
      HAL_ERR_INTERNAL, 42,     -9999,  HAL_IN_PROGRESS};
  return s[b % (sizeof s / sizeof s[0])];
}

static char g_long_message[70000];
static const char* fz_last_error(void) {
  if (bit(200)) return NULL;
  if (bit(201)) {
    if (g_long_message[0] == '\0') memset(g_long_message, 'm', sizeof g_long_message - 1);
    return g_long_message;
  }
  return g_inner->get_last_error();
}

static hal_status_t fz_init(const hal_init_args_t* args) {
  const hal_status_t s = status_of(byte_at(40));
  if (s != HAL_OK) return s;
  return g_inner->init(args);
}

static hal_status_t fz_get_count(uint32_t* count) {
  const hal_status_t s = status_of(byte_at(41));
  if (s != HAL_OK) return s;
  hal_status_t st = g_inner->device->get_count(count);
  if (bit(210)) *count = 0xFFFFFFFFu;
  return st;
}

static hal_status_t fz_list_fields(uint32_t device, hal_field_info_t* fields, uint32_t capacity,
                                   uint32_t* count) {
  const hal_status_t s = status_of(byte_at(42));
  if (s != HAL_OK) return s;
  hal_status_t st = g_inner->telemetry->list_fields(device, fields, capacity, count);
  if (bit(220) && count) *count = 0xFFFFFFFFu;
  if (bit(221) && count) *count = capacity + 1; /* claims more than it was given room for */
  return st;
}

static hal_status_t fz_read(uint32_t device, const hal_field_id_t* ids, uint32_t n,
                            hal_telemetry_sample_t* samples) {
  hal_status_t st = g_inner->telemetry->read(device, ids, n, samples);
  if (st == HAL_OK && samples != NULL && bit(230))
    for (uint32_t i = 0; i < n; i++) samples[i].value.f64 = NAN;
  return st;
}

HAL_EXPORT const hal_api_t* hal_get_api_v1(uint32_t host_major, uint32_t host_minor) {
  if (bit(250)) return NULL;
  g_inner = skeleton_inner_get_api_v1(host_major, host_minor);
  if (g_inner == NULL) return NULL;
  g_api = *g_inner;
  g_device = *g_inner->device;
  g_coll = *g_inner->coll;
  g_telemetry = *g_inner->telemetry;
  g_api.device = &g_device;
  g_api.coll = &g_coll;
  g_api.telemetry = &g_telemetry;
  g_api.abi_major = byte_at(0) < 200 ? HAL_ABI_MAJOR : byte_at(0);
  g_api.abi_minor = byte_at(1) % 8;
  g_api.struct_size = byte_at(2) < 128 ? sizeof g_api : (uint64_t)byte_at(3) * 2;
  g_device.struct_size = byte_at(4) < 128 ? sizeof g_device : (uint64_t)byte_at(5);
  g_coll.struct_size = byte_at(6) < 128 ? sizeof g_coll : (uint64_t)byte_at(7) * 2;
  g_telemetry.struct_size = byte_at(8) < 128 ? sizeof g_telemetry : (uint64_t)byte_at(9);
  g_api.init = bit(80) ? NULL : fz_init;
  g_api.finalize = bit(81) ? NULL : g_inner->finalize;
  g_api.get_last_error = bit(82) ? NULL : fz_last_error;
  if (bit(83)) g_api.device = NULL;
  if (bit(84)) g_api.coll = NULL;
  if (bit(85)) g_api.telemetry = NULL;
  g_device.get_count = bit(86) ? NULL : fz_get_count;
  if (bit(87)) g_device.get_props = NULL;
  if (bit(88)) g_coll.comm_abort = NULL;
  if (bit(89)) g_coll.post = NULL;
  g_telemetry.list_fields = bit(90) ? NULL : fz_list_fields;
  g_telemetry.read = bit(91) ? NULL : fz_read;
  if (bit(92)) g_api.extensions = NULL;
  if (bit(93)) g_api.version = NULL;
  return &g_api;
}
