/*
 * The sigmarun worker session from C (C99): the same shape of job as
 * runtime_worker.cpp, written against sigma.h and the HAL table only.
 *
 *   c_worker STEPS [KILL_STEP KILL_DEVICE [ROLLBACK_AT ROLLBACK_TO]]
 *
 * The gradient depends on the step's data batch (sigma_session_batch_of).
 * ROLLBACK_AT: every rank rolls back, once, at that step to snapshot
 * ROLLBACK_TO and skips the batches of steps [ROLLBACK_TO, ROLLBACK_AT].
 * Writes JOB_DIR/final-rank-R.bin at the end.
 */
#include <sigma/sigma.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 2048

static float params[N], grad[N];

static hal_status_t all_reduce(sigma_session_t* s, void* dev) {
  const hal_api_t* api = sigma_session_api(s);
  hal_comm_t comm = sigma_session_comm(s);
  hal_coll_args_t a;
  hal_request_t req = NULL;
  hal_status_t st;
  if (comm == NULL) return HAL_ERR_ABORTED;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.op = HAL_COLL_ALL_REDUCE;
  a.dtype = HAL_DTYPE_F32;
  a.reduce_op = HAL_REDUCE_SUM;
  a.count = N;
  a.sendbuf = dev;
  a.recvbuf = dev;
  st = api->device->memcpy(0, dev, grad, sizeof grad, HAL_COPY_HOST_TO_DEVICE, NULL);
  if (st != HAL_OK) return st;
  st = api->coll->post(comm, &a, NULL, &req);
  if (st != HAL_OK) return st;
  st = api->coll->wait(req, 30000000000ull);
  api->coll->request_free(req);
  if (st != HAL_OK) return st;
  return api->device->memcpy(0, grad, dev, sizeof grad, HAL_COPY_DEVICE_TO_HOST, NULL);
}

int main(int argc, char** argv) {
  sigma_session_t* s = NULL;
  sigma_state_view_t view;
  uint64_t steps, step = 0, kill_step = (uint64_t)-1, rollback_at = (uint64_t)-1, rollback_to = 0, batch = 0;
  int rolled = 0;
  uint32_t kill_device = 0, rank = 0, world = 1, i;
  const char* dev_env = getenv("SIGMA_DEVICE");
  void* dev = NULL;
  char path[4096];
  FILE* f;
  if (argc < 2) return 2;
  steps = strtoull(argv[1], NULL, 10);
  if (argc >= 4) {
    kill_step = strtoull(argv[2], NULL, 10);
    kill_device = (uint32_t)strtoul(argv[3], NULL, 10);
  }
  if (argc >= 6) {
    rollback_at = strtoull(argv[4], NULL, 10);
    rollback_to = strtoull(argv[5], NULL, 10);
  }
  if (!sigma_session_under_agent()) {
    fprintf(stderr, "c_worker: run me under sigmarun\n");
    return 2;
  }
  if (sigma_session_create(&s) != SIGMA_OK) {
    fprintf(stderr, "c_worker: %s\n", sigma_last_error());
    return 1;
  }
  for (i = 0; i < N; ++i) params[i] = 0.25f * (float)cos(0.01 * i);
  view.name = "params";
  view.dtype = HAL_DTYPE_F32;
  view.data = params;
  view.count = N;
  if (sigma_session_set_state(s, &view, 1) != SIGMA_OK ||
      sigma_session_api(s)->device->mem_alloc(0, sizeof grad, 64, &dev) != HAL_OK) {
    fprintf(stderr, "c_worker: %s\n", sigma_last_error());
    return 1;
  }
  if (sigma_session_join(s, &step) != SIGMA_OK) {
    int ended = sigma_session_ended(s);
    sigma_session_destroy(s);
    return ended ? 0 : 1;
  }
again:
  while (step < steps) {
    hal_status_t st;
    if (step == kill_step && dev_env != NULL && (uint32_t)atoi(dev_env) == kill_device) raise(SIGKILL);
    sigma_session_info(s, &rank, &world, NULL);
    st = sigma_session_step_begin(s, step);
    if (st == HAL_OK && step == rollback_at && !rolled) {
      rolled = 1; /* a decision every rank takes alike, once */
      st = sigma_session_rollback_skipping(s, rollback_to, rollback_to, rollback_at + 1, &step);
      if (st == HAL_OK) continue;
    }
    if (st == HAL_OK) st = sigma_session_batch_of(s, step, &batch);
    for (i = 0; i < N; ++i)
      grad[i] = 0.01f * sinf(params[i] * 2.0f + 0.02f * (float)batch + 0.3f * (float)rank);
    if (st == HAL_OK) st = all_reduce(s, dev);
    if (st == HAL_OK) {
      sigma_step_report_t report;
      memset(&report, 0, sizeof report);
      report.struct_size = sizeof report;
      report.has_loss = 1;
      report.loss = (double)grad[0] * grad[0];
      report.tokens = 64;
      for (i = 0; i < N; ++i) params[i] -= 0.05f * grad[i] / (float)world;
      st = sigma_session_step_end_report(s, step, &report);
    }
    if (st == HAL_OK) {
      ++step;
      continue;
    }
    /* The failed call's status goes with the recovery; a failed recovery's own next. */
    while ((st = sigma_session_recover_status(s, st, sigma_last_error(), &step)) != SIGMA_OK) {
      if (sigma_session_ended(s)) {
        sigma_session_destroy(s);
        return 0;
      }
    }
  }
  sigma_session_info(s, &rank, NULL, NULL);
  snprintf(path, sizeof path, "%s/final-rank-%u.bin", getenv("SIGMA_JOB_DIR"), rank);
  f = fopen(path, "wb");
  if (f == NULL || fwrite(params, sizeof params, 1, f) != 1) return 1;
  fclose(f);
  if (sigma_session_finish(s, step) == HAL_ERR_ABORTED && !sigma_session_ended(s)) {
    /* A peer failed in the last steps: this rank's state restores it. */
    while (sigma_session_recover(s, sigma_last_error(), &step) != SIGMA_OK) {
      if (sigma_session_ended(s)) {
        sigma_session_destroy(s);
        return 0;
      }
    }
    goto again;
  }
  sigma_session_api(s)->device->mem_free(0, dev);
  sigma_session_destroy(s);
  return 0;
}
