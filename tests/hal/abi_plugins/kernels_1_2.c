/*
 * A plugin built from the frozen ABI 1.2 header (compiled with -include
 * sigma/abi/hal_1_2.h) that chains HAL_EXT_KERNELS in 1.2's positional form
 * over memory it declares the host cannot read (HAL_MEMORY_DEVICE): today's
 * host must call its entry through the 1.2 adapter (hal::KernelEntries).
 * It offers one entry, checksum; the host stages the others. The skeleton
 * does the rest.
 */
#define hal_get_api_v1 skeleton_inner_get_api_v1
#include "skeleton.c"
#undef hal_get_api_v1

static unsigned long long g_checksum_calls;
static hal_api_t g_api;
static hal_device_api_t g_device;
static hal_ext_kernels_t g_kernels; /* 1.2's form: positional entries */
static const hal_device_api_t* g_inner_device;

static hal_status_t positional_checksum(uint32_t device, const void* data, uint64_t bytes, uint64_t* out) {
  if (device != 0 || out == NULL || (bytes > 0 && data == NULL))
    return fail(HAL_ERR_INVALID_ARGUMENT, "kernels_1_2: bad checksum arguments");
  *out = hal_h64(data, bytes);
  __atomic_add_fetch(&g_checksum_calls, 1, __ATOMIC_RELAXED);
  return HAL_OK;
}

static hal_status_t device_memory_props(uint32_t device, hal_device_props_t* props) {
  hal_status_t st = g_inner_device->get_props(device, props);
  if (st == HAL_OK) props->memory_kind = HAL_MEMORY_DEVICE;
  return st;
}

/* How many times the host called the checksum entry (the test asks). */
HAL_EXPORT unsigned long long abi_1_2_checksum_calls(void) {
  return __atomic_load_n(&g_checksum_calls, __ATOMIC_RELAXED);
}

HAL_EXPORT const hal_api_t* hal_get_api_v1(uint32_t host_major, uint32_t host_minor) {
  const hal_api_t* inner = skeleton_inner_get_api_v1(host_major, host_minor);
  if (inner == NULL) return NULL;
  g_api = *inner;
  g_inner_device = inner->device;
  g_device = *inner->device;
  g_device.get_props = device_memory_props;
  g_api.device = &g_device;
  g_api.capabilities = (inner->capabilities & ~HAL_CAP_HOST_MEMORY) | HAL_CAP_KERNELS;
  g_kernels.header.struct_size = sizeof g_kernels;
  g_kernels.header.type = HAL_EXT_KERNELS;
  g_kernels.header.next = inner->extensions;
  g_kernels.checksum = positional_checksum;
  g_api.extensions = &g_kernels.header;
  return &g_api;
}
