/* Built as C99 with -pedantic -Werror and linked with the CPU kernels'
 * static library only (no libsigma): what a vendor's plugin may use, used
 * from C the way a plugin would. */
#include <sigma/cpu_kernels.h>
#include <sigma/hal.h>
#include <sigma/hal_support.h>

#include "c_check.h"

#include <stdio.h>
#include <string.h>

static void check_companion(void) {
  hal_field_info_t f;
  hal_field_id_t id;
  CHECK(hal_dtype_size(HAL_DTYPE_F32) == 4 && hal_dtype_size(HAL_DTYPE_BF16) == 2);
  CHECK(hal_dtype_size(HAL_DTYPE_I64) == 8 && hal_dtype_size(HAL_DTYPE_U8) == 1);
  CHECK(hal_dtype_size(HAL_DTYPE_COUNT_V1) == 0);
  for (id = 1; id < HAL_FIELD_STANDARD_COUNT_V1; ++id) {
    memset(&f, 0xAB, sizeof f);
    CHECK(hal_standard_field(id, &f) == 1);
    CHECK(f.id == id && f.reserved == 0 && f.name[0] != '\0' && strlen(f.name) < sizeof f.name);
  }
  CHECK(hal_standard_field(HAL_FIELD_TEMPERATURE_C, &f) && strcmp(f.name, "temperature") == 0 &&
        strcmp(f.unit, "C") == 0 && f.type == HAL_VALUE_F64 && f.flags == 0);
  CHECK(hal_standard_field(HAL_FIELD_ECC_UNCORRECTABLE, &f) && f.type == HAL_VALUE_U64 &&
        f.flags == HAL_FIELD_FLAG_MONOTONIC);
  CHECK(hal_standard_field(0, &f) == 0 && hal_standard_field(HAL_FIELD_VENDOR_FIRST, &f) == 0);
  /* sigma-h64's published values (tests/unit/kernels_test.cpp has the same). */
  CHECK(hal_h64("a", 1) == UINT64_C(0xd48789040abca3c7));
  CHECK(hal_h64("sigma-h64", 9) == UINT64_C(0x26de39d7c8c8ada2));
}

/* A root table with one REQUIRED entry NULL: refused, named. */
static void check_api_checks(void) {
  hal_api_t api;
  char why[160];
  size_t small;
  memset(&api, 0, sizeof api);
  api.struct_size = sizeof api;
  api.abi_major = HAL_ABI_MAJOR;
  api.name = "probe";
  api.version = "0";
  CHECK(hal_check_api(NULL, why, sizeof why) == -1 && strstr(why, "root table") != NULL);
  api.init = NULL;
  CHECK(hal_check_api(&api, why, sizeof why) == -1 &&
        strcmp(why, "hal_api_t.init is NULL, but it is required") == 0);
  api.abi_major = 2;
  CHECK(hal_check_api(&api, why, sizeof why) == -1 && strstr(why, "major 2") != NULL);
  api.abi_major = HAL_ABI_MAJOR;
  api.struct_size = 8;
  small = (size_t)failures + 4; /* not a constant: a constant would be a truncation warning */
  CHECK(hal_check_api(&api, why, small) == -1 && strlen(why) == small - 1); /* cut, terminated */
}

static void check_kernels(void) {
  float x[5] = {1.0f, -3.0f, 2.0f, 0.0f, 0.0f};
  unsigned char planes[20], back[20];
  hal_kernel_scan_result_t r;
  uint64_t h = 0;
  int32_t ids[2] = {0, 7};
  int64_t row_of[2];
  uint64_t offsets[3];
  x[4] = x[0] / x[3]; /* +inf */
  CHECK(sigma_cpu_grad_scan(x, 5, HAL_DTYPE_F32, &r) == HAL_OK);
  CHECK(r.non_finite == 1 && r.sum_squares == 14.0 && r.amax == 3.0);
  CHECK(sigma_cpu_shuffle(x, NULL, planes, 5, 4, 0) == HAL_OK);
  CHECK(sigma_cpu_shuffle(planes, NULL, back, 5, 4, 1) == HAL_OK && memcmp(back, x, 20) == 0);
  CHECK(sigma_cpu_h64("a", 1, &h) == HAL_OK && h == hal_h64("a", 1));
  CHECK(sigma_cpu_grad_scan(x, 5, HAL_DTYPE_I32, &r) == HAL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(sigma_cpu_last_error(), "not f32, f16 or bf16") != NULL);
  CHECK(sigma_cpu_moe_plan(ids, 1, 2, 2, row_of, offsets) == HAL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(sigma_cpu_last_error(), "names expert 7 of 2") != NULL);
  CHECK(sigma_cpu_force_isa(SIGMA_CPU_ISA_SCALAR) == HAL_OK &&
        sigma_cpu_active_isa() == SIGMA_CPU_ISA_SCALAR);
  CHECK(sigma_cpu_h64("sigma-h64", 9, &h) == HAL_OK && h == UINT64_C(0x26de39d7c8c8ada2));
  sigma_cpu_reset_isa();
  CHECK(sigma_cpu_force_isa(9) == HAL_ERR_INVALID_ARGUMENT);
}

int main(void) {
  check_companion();
  check_api_checks();
  check_kernels();
  if (failures == 0) printf("vendor headers: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
