/* sigma.h end to end from C99: the checkpointer (asynchronous save, restore,
 * a damaged checkpoint refused as data loss), the guardrails (a NaN
 * gradient skipped), the health monitor (a device heating past critical)
 * and the planner (a request's YAML to plans). The session is exercised
 * under a real sigmarun by tests/runtime/c_worker.c. Exits non-zero with
 * the failing line on any wrong answer. */
#include <sigma/sigma.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, __LINE__, #cond, sigma_last_error()); \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

static void checkpoints(const char* dir) {
  float w[1000], back[1000];
  int64_t counter = 41, counter_back = 0;
  sigma_state_view_t views[2];
  sigma_checkpoint_create_args_t args;
  sigma_checkpoint_t* ck = NULL;
  uint64_t step = 0;
  int i;
  char path[4096];
  FILE* f;
  for (i = 0; i < 1000; ++i) w[i] = (float)i * 0.5f;
  views[0].name = "w";
  views[0].dtype = HAL_DTYPE_F32;
  views[0].data = w;
  views[0].count = 1000;
  views[1].name = "counter";
  views[1].dtype = HAL_DTYPE_I64;
  views[1].data = &counter;
  views[1].count = 1;

  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.dir = dir;
  args.async_save = 1;
  args.base_every = 1;
  CHECK(sigma_checkpoint_create(&args, &ck) == SIGMA_OK);
  CHECK(sigma_checkpoint_save(ck, 1, views, 2, "{\"epoch\":1}") == SIGMA_OK);
  w[3] = -1.0f;
  counter = 42;
  CHECK(sigma_checkpoint_save(ck, 2, views, 2, "{\"epoch\":2}") == SIGMA_OK);
  CHECK(sigma_checkpoint_wait(ck) == SIGMA_OK);

  views[0].data = back;
  views[1].data = &counter_back;
  CHECK(sigma_checkpoint_restore(ck, views, 2, UINT64_MAX, &step) == SIGMA_OK);
  CHECK(step == 2 && back[3] == -1.0f && back[999] == w[999] && counter_back == 42);
  CHECK(strcmp(sigma_checkpoint_extra(ck), "{\"epoch\":2}") == 0);
  CHECK(sigma_checkpoint_restore(ck, views, 2, 1, &step) == SIGMA_OK && step == 1 && back[3] == 1.5f);

  /* Views that do not match what was saved: the caller's mistake. */
  views[0].count = 999;
  CHECK(sigma_checkpoint_restore(ck, views, 2, UINT64_MAX, &step) == HAL_ERR_INVALID_ARGUMENT);
  views[0].count = 1000;

  /* Both checkpoints' manifests destroyed: nothing good is left. */
  for (i = 1; i <= 2; ++i) {
    snprintf(path, sizeof path, "%s/job/step-%020d/rank-00000/manifest.sgck", dir, i);
    f = fopen(path, "r+b");
    CHECK(f != NULL);
    CHECK(fwrite("garbage!", 1, 8, f) == 8);
    fclose(f);
  }
  CHECK(sigma_checkpoint_restore(ck, views, 2, UINT64_MAX, &step) == SIGMA_ERR_DATA_LOSS);
  CHECK(strstr(sigma_last_error(), "manifest") != NULL);
  CHECK(strcmp(sigma_status_name(SIGMA_ERR_DATA_LOSS), "SIGMA_ERR_DATA_LOSS") == 0);
  sigma_checkpoint_destroy(ck);

  /* A folder that cannot be made is named. */
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.dir = "/proc/no/such/dir";
  CHECK(sigma_checkpoint_create(&args, &ck) == HAL_ERR_UNAVAILABLE);
  CHECK(strstr(sigma_last_error(), "/proc/no/such/dir") != NULL);
  args.struct_size = 8;
  CHECK(sigma_checkpoint_create(&args, &ck) == HAL_ERR_INVALID_ARGUMENT);

  /* Chunks forced raw round-trip too; a mode that does not exist is named. */
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.dir = dir;
  args.job = "raw";
  args.compression = 2;
  CHECK(sigma_checkpoint_create(&args, &ck) == SIGMA_OK);
  views[0].data = w;
  CHECK(sigma_checkpoint_save(ck, 5, views, 2, NULL) == SIGMA_OK);
  views[0].data = back;
  back[3] = 0;
  CHECK(sigma_checkpoint_restore(ck, views, 2, UINT64_MAX, &step) == SIGMA_OK && step == 5 &&
        back[3] == -1.0f);
  sigma_checkpoint_destroy(ck);
  args.compression = 7;
  CHECK(sigma_checkpoint_create(&args, &ck) == HAL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(sigma_last_error(), "compression 7") != NULL);
}

static void guardrails(void) {
  float grads[64];
  sigma_guardrails_layer_t layer;
  sigma_buffer_view_t view;
  sigma_guardrails_create_args_t args;
  sigma_guardrails_decision_t d;
  sigma_guardrails_t* g = NULL;
  int i;
  for (i = 0; i < 64; ++i) grads[i] = 0.01f * (float)i;
  layer.name = "layer0";
  layer.dtype = HAL_DTYPE_F32;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.layers = &layer;
  args.num_layers = 1;
  args.world = 1;
  CHECK(sigma_guardrails_create(&args, &g) == SIGMA_OK);
  view.data = grads;
  view.count = 64;
  view.dtype = HAL_DTYPE_F32;
  view.layer = 0;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  CHECK(sigma_guardrails_step(g, 0, 2.0, &view, 1, &d) == SIGMA_OK);
  CHECK(d.action == SIGMA_GUARDRAILS_APPLY);
  grads[7] = NAN;
  CHECK(sigma_guardrails_step(g, 1, 2.0, &view, 1, &d) == SIGMA_OK);
  CHECK(d.action == SIGMA_GUARDRAILS_SKIP && d.non_finite == 1 && strstr(d.reason, "non-finite") != NULL);
  sigma_guardrails_destroy(g);
}

static void health(void) {
  sigma_health_t* h = NULL;
  sigma_health_create_args_t args;
  sigma_device_health_t out;
  hal_telemetry_sample_t t;
  uint32_t events = 0;
  double s;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.critical_c = 92.0;
  CHECK(sigma_health_create(&args, &h) == SIGMA_OK);
  memset(&t, 0, sizeof t);
  t.id = HAL_FIELD_TEMPERATURE_C;
  t.status = HAL_OK;
  t.type = HAL_VALUE_F64;
  for (s = 0; s < 10; s += 1) {
    t.value.f64 = 60.0;
    CHECK(sigma_health_observe_heartbeat(h, 2, s) == SIGMA_OK);
    CHECK(sigma_health_observe_telemetry(h, 2, s, &t, 1) == SIGMA_OK);
  }
  CHECK(sigma_health_evaluate(h, 10, &events) == SIGMA_OK);
  memset(&out, 0, sizeof out);
  out.struct_size = sizeof out;
  CHECK(sigma_health_query(h, 2, &out) == SIGMA_OK);
  CHECK(out.state == SIGMA_HEALTH_HEALTHY && out.score == 1.0 && out.reason[0] == '\0');
  /* Ten seconds at 97 C: the smoothed temperature crosses critical. */
  for (s = 11; s < 21; s += 1) {
    t.value.f64 = 97.0;
    CHECK(sigma_health_observe_heartbeat(h, 2, s) == SIGMA_OK);
    CHECK(sigma_health_observe_telemetry(h, 2, s, &t, 1) == SIGMA_OK);
  }
  CHECK(sigma_health_evaluate(h, 21, &events) == SIGMA_OK && events > 0);
  CHECK(sigma_health_query(h, 2, &out) == SIGMA_OK);
  CHECK(out.state == SIGMA_HEALTH_FAILING && out.num_warnings > 0 && out.score < 1.0);
  CHECK(strstr(out.reason, "temperature") != NULL);
  CHECK(sigma_health_query(h, 5, &out) == HAL_ERR_INVALID_ARGUMENT);
  sigma_health_destroy(h);
  args.critical_c = 50.0; /* below warn_c */
  CHECK(sigma_health_create(&args, &h) == HAL_ERR_INVALID_ARGUMENT);
}

static void planner(void) {
  const char* request =
      "model: {name: small-moe, layers: 8, hidden: 1024, ffn: 4096, heads: 16, vocab: 32000,\n"
      "        experts: 8, top_k: 2, seq: 2048, global_batch: 256}\n"
      "devices: {count: 16, per_node: 8, memory_gib: 80, peak_tflops: 989, gemm_tflops: 600,\n"
      "          intra_gbps: 450, inter_gbps: 50}\n";
  char* json = NULL;
  CHECK(sigma_plan(request, "small.yaml", 3, &json) == SIGMA_OK);
  CHECK(strstr(json, "\"plans\"") != NULL && strstr(json, "\"mfu\"") != NULL && strstr(json, "small-moe"));
  sigma_free(json);
  json = NULL;
  CHECK(sigma_plan("model: {layers: 0}\n", "bad.yaml", 0, &json) == HAL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(sigma_last_error(), "bad.yaml:1") != NULL && json == NULL);
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  checkpoints(argv[1]);
  guardrails();
  health();
  planner();
  printf("sigma.h end to end: ok\n");
  return 0;
}
