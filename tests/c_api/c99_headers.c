/* Built as C99 with -pedantic -Werror: proves sigma/hal.h and sigma/sigma.h
 * are C99, then uses them from C the way a C caller would. */
#include <sigma/hal.h>
#include <sigma/sigma.h>

#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                    \
    }                                                                \
  } while (0)

int main(void) {
  sigma_plugin_t *plugin = NULL;
  const hal_api_t *api;
  hal_device_api_t small_table;
  uint32_t n = 0;

  CHECK(strlen(sigma_version()) > 0);
  /* HAL_HAS_FIELD: a table whose struct_size stops before a field lacks it. */
  memset(&small_table, 0, sizeof small_table);
  small_table.struct_size = offsetof(hal_device_api_t, self_test);
  CHECK(!HAL_HAS_FIELD(&small_table, hal_device_api_t, self_test));
  CHECK(HAL_HAS_FIELD(&small_table, hal_device_api_t, memcpy));

  CHECK(sigma_plugin_load("no_such_vendor", NULL, &plugin) == HAL_ERR_UNAVAILABLE);
  CHECK(strstr(sigma_last_error(), "no_such_vendor") != NULL);
  CHECK(sigma_plugin_load(NULL, NULL, &plugin) == HAL_ERR_INVALID_ARGUMENT);

  CHECK(sigma_plugin_load("skeleton", NULL, &plugin) == SIGMA_OK);
  api = sigma_plugin_api(plugin);
  CHECK(api != NULL && strcmp(api->name, "skeleton") == 0);
  CHECK(api != NULL && api->device->get_count(&n) == HAL_OK && n == 1);
  CHECK(strstr(sigma_plugin_path(plugin), "libsigma_hal_skeleton.so") != NULL);
  sigma_plugin_unload(plugin);
  sigma_plugin_unload(NULL);

  if (failures == 0) printf("C API: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
