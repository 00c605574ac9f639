/* Built as C99 with -pedantic -Werror: proves sigma/hal.h and sigma/sigma.h
 * are C99, then uses them from C the way a C caller would. */
#include <sigma/hal.h>
#include <sigma/sigma.h>

#include "c_check.h"

#include <stdio.h>
#include <string.h>

/* The guardrails from C: a clean step, a step with a NaN, a bad config. */
static void check_guardrails(void) {
  sigma_guardrails_t* g = NULL;
  sigma_guardrails_layer_t layers[2] = {{"attn", HAL_DTYPE_BF16}, {"mlp", HAL_DTYPE_F16}};
  float a[64], b[32];
  sigma_buffer_view_t views[2];
  sigma_guardrails_decision_t d;
  sigma_guardrails_create_args_t args;
  uint64_t fp = 0;
  int i;
  for (i = 0; i < 64; ++i) a[i] = 0.01f;
  for (i = 0; i < 32; ++i) b[i] = -0.02f;
  views[0].data = a, views[0].count = 64, views[0].dtype = HAL_DTYPE_F32, views[0].layer = 0;
  views[1].data = b, views[1].count = 32, views[1].dtype = HAL_DTYPE_F32, views[1].layer = 1;

  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.layers = layers;
  args.num_layers = 2;
  args.world = 1;
  CHECK(sigma_guardrails_create(&args, &g) == SIGMA_OK);
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  CHECK(sigma_guardrails_step(g, 1, 2.5, views, 2, &d) == SIGMA_OK);
  CHECK(d.action == SIGMA_GUARDRAILS_APPLY && d.loss == 2.5 && d.loss_scale == 65536.0);
  CHECK(d.reason != NULL && strlen(d.reason) > 0);
  b[3] = b[3] / 0.0f * 0.0f; /* NaN */
  CHECK(sigma_guardrails_step(g, 2, 2.5, views, 2, &d) == SIGMA_OK);
  CHECK(d.action == SIGMA_GUARDRAILS_SKIP && d.non_finite == 1 && d.next_loss_scale == 32768.0);
  CHECK(strstr(d.reason, "mlp") != NULL);
  views[1].layer = 7;
  CHECK(sigma_guardrails_step(g, 3, 2.5, views, 2, &d) == HAL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(sigma_last_error(), "layer 7") != NULL);
  CHECK(sigma_fingerprint(views, 1, &fp) == SIGMA_OK && fp != 0);
  sigma_guardrails_destroy(g);
  sigma_guardrails_destroy(NULL);
  args.config_path = "/nonexistent/g.yaml";
  CHECK(sigma_guardrails_create(&args, &g) == HAL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(sigma_last_error(), "/nonexistent/g.yaml:0") != NULL);
  args.config_path = NULL;
  args.world = 2; /* no communicator */
  CHECK(sigma_guardrails_create(&args, &g) == HAL_ERR_INVALID_ARGUMENT);
  args.world = 1;
  args.struct_size = 8; /* a caller built against nothing this library knows */
  CHECK(sigma_guardrails_create(&args, &g) == HAL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(sigma_last_error(), "struct_size 8") != NULL);
  CHECK(sigma_guardrails_create(NULL, &g) == HAL_ERR_INVALID_ARGUMENT);
}

int main(void) {
  sigma_plugin_t* plugin = NULL;
  const hal_api_t* api;
  hal_device_api_t small_table;
  uint32_t n = 0;

  CHECK(strlen(sigma_version()) > 0);
  CHECK(strcmp(sigma_status_name(SIGMA_ERR_DATA_LOSS), "SIGMA_ERR_DATA_LOSS") == 0);
  CHECK(strcmp(sigma_status_name(HAL_ERR_TIMEOUT), "HAL_ERR_TIMEOUT") == 0);
  CHECK(strcmp(sigma_status_name(12345), "undefined status") == 0);
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

  check_guardrails();

  if (failures == 0) printf("C API: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
