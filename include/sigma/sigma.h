/*
 * sigma/sigma.h -- the C API of libsigma, for callers in any language.
 *
 * C99. Every function returns a sigma_status_t: the HAL's statuses
 * (SIGMA_OK = HAL_OK, negatives are HAL_ERR_*) plus SIGMA_ERR_DATA_LOSS,
 * libsigma's own; after a failure sigma_last_error() gives the calling
 * thread's message. Nothing is thrown across this boundary: every entry
 * catches whatever it meets and returns it as a status (an exception that
 * is no std::exception becomes HAL_ERR_INTERNAL, said so).
 *
 * Functions that take many parameters take one arguments struct whose
 * first field is struct_size, as the HAL's do: the caller sets it to
 * sizeof the struct it compiled against; the library accepts a larger one
 * and refuses one smaller than the struct's first version.
 */
#ifndef SIGMA_SIGMA_H_
#define SIGMA_SIGMA_H_

#include <sigma/hal.h>

#include <stddef.h>

/* Exported from libsigma (built with hidden visibility); the C++ headers
 * use the same mark (sigma/export.hpp). */
#ifndef SIGMA_EXPORT
#if defined(__GNUC__) || defined(__clang__)
#define SIGMA_EXPORT __attribute__((visibility("default")))
#else
#define SIGMA_EXPORT
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t sigma_status_t;
#define SIGMA_OK HAL_OK
/* Stored state is damaged, torn or missing: a checkpoint or snapshot failed
 * its checks, or a restore found other data than it was told to expect. Not
 * an internal error: the previous good state may still be there. Outside
 * the HAL's range of statuses. */
#define SIGMA_ERR_DATA_LOSS (-1000)

/*
 * The name of a status ("SIGMA_OK", "HAL_ERR_TIMEOUT", "SIGMA_ERR_DATA_LOSS"),
 * or "undefined status" for a value that is none. Static string, never NULL.
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
SIGMA_EXPORT const char* sigma_status_name(sigma_status_t status);

/* A loaded, initialised HAL plugin (opaque). */
typedef struct sigma_plugin_s sigma_plugin_t;

/*
 * The library's version, "MAJOR.MINOR.PATCH". Static string, never NULL.
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
SIGMA_EXPORT const char* sigma_version(void);

/*
 * The message of the last failing sigma_* call on the calling thread, or "".
 * Never NULL; valid until the thread's next sigma_* call.
 * Thread-safety: any thread, concurrently (each thread sees its own).
 * Blocks: no.
 */
SIGMA_EXPORT const char* sigma_last_error(void);

/*
 * Loads a HAL plugin by short name ("cpu", "skeleton": searched in
 * SIGMA_HAL_PLUGIN_PATH, then the install's plugin folder) or by path, checks
 * it against the HAL ABI and initialises it.
 * [in] name_or_path: may not be NULL.
 * [in, optional] options: the plugin's hal_init_args_t.options, may be NULL.
 * [out] plugin: owned by the caller until sigma_plugin_unload.
 * Errors: INVALID_ARGUMENT (NULL, or the plugin breaks the ABI), UNAVAILABLE
 * (not found, cannot be loaded, or its init failed), NOT_SUPPORTED (another
 * ABI major). The message names the file and the field or symbol at fault.
 * Thread-safety: any thread, concurrently. Blocks: while the plugin starts.
 */
SIGMA_EXPORT sigma_status_t sigma_plugin_load(const char* name_or_path, const char* options,
                                              sigma_plugin_t** plugin);

/*
 * Finalises and unloads. NULL is accepted. Every handle obtained through the
 * plugin's tables becomes invalid.
 * Thread-safety: any thread, not concurrently on the same plugin.
 * Blocks: while the plugin finalises.
 */
SIGMA_EXPORT void sigma_plugin_unload(sigma_plugin_t* plugin);

/*
 * The plugin's validated root table, owned by the plugin, valid until
 * sigma_plugin_unload. NULL when plugin is NULL.
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
SIGMA_EXPORT const hal_api_t* sigma_plugin_api(const sigma_plugin_t* plugin);

/*
 * The file the plugin was loaded from; owned by the plugin object, valid
 * until sigma_plugin_unload. NULL when plugin is NULL.
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
SIGMA_EXPORT const char* sigma_plugin_path(const sigma_plugin_t* plugin);

/* ------------------------------------------------------------------------- */
/* Guardrails (see sigma/guardrails.hpp for the policies)                    */
/* ------------------------------------------------------------------------- */

/* A guardrails engine (opaque). */
typedef struct sigma_guardrails_s sigma_guardrails_t;

/* A layer the guardrails track: its name and low-precision compute dtype
 * (HAL_DTYPE_F16 or HAL_DTYPE_BF16; HAL_DTYPE_F32 layers never escalate). */
typedef struct sigma_guardrails_layer_t {
  const char* name;
  hal_dtype_t dtype;
} sigma_guardrails_layer_t;

/* One host-addressable buffer of f32 / f16 / bf16 values, borrowed for the
 * call. `layer` indexes the layers given at creation. */
typedef struct sigma_buffer_view_t {
  const void* data;
  uint64_t count;
  hal_dtype_t dtype;
  uint32_t layer;
} sigma_buffer_view_t;

typedef enum sigma_guardrails_action_e {
  SIGMA_GUARDRAILS_APPLY = 0,   /* update with gradients * grad_multiplier */
  SIGMA_GUARDRAILS_SKIP = 1,    /* no update; next batch */
  SIGMA_GUARDRAILS_ROLLBACK = 2 /* restore rollback_to_step, skip the data window */
} sigma_guardrails_action_t;

/* A decision. The caller sets struct_size; the strings and arrays are owned
 * by the engine and valid until its next call. */
typedef struct sigma_guardrails_decision_t {
  uint64_t struct_size;
  uint64_t step;
  int32_t action; /* sigma_guardrails_action_t */
  uint32_t num_escalate;
  double loss, global_norm, clip_factor, loss_scale, next_loss_scale, grad_multiplier;
  uint64_t non_finite;
  uint64_t rollback_to_step, skip_data_begin, skip_data_end;
  const char* reason;
  const char* const* escalate;   /* num_escalate layer names to run in fp32 */
  const char* const* deescalate; /* num_deescalate layer names back to low precision */
  uint32_t num_deescalate;
  /* 1: call sigma_guardrails_check_fingerprint after this step (its interval
   * came, or replicated gradients disagreed). */
  int32_t check_fingerprint;
} sigma_guardrails_decision_t;

/* What a guardrails engine is created with. Zero-initialise, set
 * struct_size = sizeof(sigma_guardrails_create_args_t), then the fields. */
typedef struct sigma_guardrails_create_args_t {
  uint64_t struct_size;
  /* [in, optional] a YAML config (keys as in guardrails.hpp); NULL for the
   * defaults. */
  const char* config_path;
  /* [in] the layers, copied. */
  const sigma_guardrails_layer_t* layers;
  uint32_t num_layers;
  /* [in] the HAL device the exchange buffers live on. */
  uint32_t device;
  /* [in, optional] the communicator of the group, created by the caller
   * through the plugin's table; borrowed, must outlive the engine. NULL/NULL
   * for a single process. */
  sigma_plugin_t* plugin;
  hal_comm_t comm;
  /* [in] this rank's place in the group (0 and 1 for a single process). */
  int32_t rank, world;
  /* [in] nonzero when every rank holds the same all-reduced gradients
   * (plain data parallelism), zero for shards. */
  int32_t replicated;
} sigma_guardrails_create_args_t;

/* The size of the struct's first version, the smallest accepted; it stays
 * this when fields are appended. */
#define SIGMA_GUARDRAILS_CREATE_ARGS_V1_SIZE \
  (offsetof(sigma_guardrails_create_args_t, replicated) + sizeof(int32_t))

/*
 * Creates a guardrails engine.
 * [in] args: read during the call only.
 * [out] out: owned by the caller until sigma_guardrails_destroy.
 * Errors: INVALID_ARGUMENT (args NULL or struct_size too small; bad config,
 *   naming file:line:key; bad layers; world > 1 without a communicator),
 *   UNAVAILABLE (the journal cannot be opened).
 * Thread-safety: any thread. Blocks: no.
 */
SIGMA_EXPORT sigma_status_t sigma_guardrails_create(const sigma_guardrails_create_args_t* args,
                                                    sigma_guardrails_t** out);

/* Destroys the engine (closes its journal). NULL is accepted.
 * Thread-safety: any thread, no other call on the engine concurrently.
 * Blocks: no (the journal file is closed). */
SIGMA_EXPORT void sigma_guardrails_destroy(sigma_guardrails_t* g);

/*
 * Collective: one step. views: any number of buffers, each naming its layer.
 * [out] decision: struct_size set by the caller.
 * Errors: INVALID_ARGUMENT (bad views, step order), TIMEOUT / ABORTED /
 *   REMOTE_ERROR from the exchange.
 * Thread-safety: one thread at a time per engine. Blocks: for the exchange.
 */
SIGMA_EXPORT sigma_status_t sigma_guardrails_step(sigma_guardrails_t* g, uint64_t step, double loss,
                                                  const sigma_buffer_view_t* views, uint64_t num_views,
                                                  sigma_guardrails_decision_t* decision);

/* A snapshot of the state after `step` exists: a rollback candidate.
 * Thread-safety: one thread at a time per engine. Blocks: no. */
SIGMA_EXPORT sigma_status_t sigma_guardrails_note_snapshot(sigma_guardrails_t* g, uint64_t step);

/*
 * Collective: compares the replicas' parameter fingerprints at `step`.
 * [out] match: 1 when all agree. [out, optional] odd_rank: the one rank that
 * differs from a strict majority, or -1.
 * Thread-safety: one thread at a time per engine. Blocks: for the exchange
 * of every rank's fingerprint.
 */
SIGMA_EXPORT sigma_status_t sigma_guardrails_check_fingerprint(sigma_guardrails_t* g, uint64_t step,
                                                               const sigma_buffer_view_t* params,
                                                               uint64_t num_params, int32_t* match,
                                                               int32_t* odd_rank);

/*
 * After a mismatch at `step`: the fingerprint of the step re-run on `device`.
 * [out] faulty_rank: the first replica that disagrees with the re-run, or -1
 * when the re-run matches none. Not collective: every rank given the same
 * figures reaches the same answer.
 * Thread-safety: one thread at a time per engine. Blocks: no.
 */
SIGMA_EXPORT sigma_status_t sigma_guardrails_attribute_rerun(sigma_guardrails_t* g, uint64_t step,
                                                             uint64_t rerun_fingerprint, const char* device,
                                                             int32_t* faulty_rank);

/* xxh3 over the bytes of the buffers, in order (their `layer` is ignored).
 * Thread-safety: any thread, concurrently. Blocks: no (reads the bytes). */
SIGMA_EXPORT sigma_status_t sigma_fingerprint(const sigma_buffer_view_t* params, uint64_t num_params,
                                              uint64_t* out);

/* ------------------------------------------------------------------------- */
/* Worker session under sigmarun (see sigma/runtime.hpp for the protocol)    */
/* ------------------------------------------------------------------------- */

/* A worker's session with the sigmarun agent (opaque). */
typedef struct sigma_session_s sigma_session_t;

/* One named tensor of the state the session snapshots and restores: host
 * memory the caller owns and keeps valid (same address and size) while the
 * session lives. */
typedef struct sigma_state_view_t {
  const char* name; /* copied */
  hal_dtype_t dtype;
  void* data;
  uint64_t count; /* elements */
} sigma_state_view_t;

/* 1 when this process was started by sigmarun (SIGMA_AGENT_SOCKET is set).
 * Thread-safety: any thread, concurrently. Blocks: no. */
SIGMA_EXPORT int32_t sigma_session_under_agent(void);

/*
 * Connects to the agent named by the environment sigmarun sets, loads the
 * HAL plugin for this device, runs its self-test and says hello.
 * [out] out: owned by the caller until sigma_session_destroy.
 * Errors: INVALID_ARGUMENT (a variable missing or malformed), UNAVAILABLE (no
 * agent, the plugin failed to load, or the self-test failed).
 * Thread-safety: any thread. Blocks: for the self-test (about a second).
 */
SIGMA_EXPORT sigma_status_t sigma_session_create(sigma_session_t** out);

/* Ends the session (its heartbeat thread too). NULL is accepted.
 * Thread-safety: the training thread, no other call on the session
 * concurrently. Blocks: until the heartbeat thread has stopped. */
SIGMA_EXPORT void sigma_session_destroy(sigma_session_t* s);

/* Registers the state (copies the list, not the data).
 * Thread-safety: the training thread, before the join. Blocks: no. */
SIGMA_EXPORT sigma_status_t sigma_session_set_state(sigma_session_t* s, const sigma_state_view_t* views,
                                                    uint32_t num_views);

/*
 * Blocks until the agent assigns a rank, builds the communicator, snapshots or
 * restores the state. [out] next_step: the first step to run.
 * Errors: ABORTED when the agent let this worker go (sigma_session_ended
 * is then 1: exit), UNAVAILABLE when the agent is gone, TIMEOUT / REMOTE_ERROR
 * from building the communicator (call sigma_session_recover).
 * Thread-safety: the training thread. Blocks: until the agent assigns
 * (a spare waits here until it is needed) and the restore is done.
 */
SIGMA_EXPORT sigma_status_t sigma_session_join(sigma_session_t* s, uint64_t* next_step);

/* [out, optional] rank, world, generation of the current assignment.
 * Thread-safety: the training thread. Blocks: no. */
SIGMA_EXPORT sigma_status_t sigma_session_info(const sigma_session_t* s, uint32_t* rank, uint32_t* world,
                                               uint64_t* generation);

/*
 * The current communicator and the plugin's table to post collectives with.
 * Both owned by the session; the communicator is valid until the next
 * sigma_session_join / _recover / _destroy. NULL before a join.
 * Thread-safety: the training thread. Blocks: no.
 */
SIGMA_EXPORT hal_comm_t sigma_session_comm(sigma_session_t* s);
SIGMA_EXPORT const hal_api_t* sigma_session_api(const sigma_session_t* s);

/* The step in flight, for the heartbeats.
 * Thread-safety: the training thread. Blocks: no. */
SIGMA_EXPORT sigma_status_t sigma_session_step_begin(sigma_session_t* s, uint64_t step);
/* Snapshots when due (collective). ABORTED: the agent stops the job after
 * this step (a migration): call sigma_session_recover.
 * Thread-safety: the training thread. Blocks: for the snapshot's exchange
 * and, when due and not asynchronous, the disk checkpoint. */
SIGMA_EXPORT sigma_status_t sigma_session_step_end(sigma_session_t* s, uint64_t step);
/* 1 once the agent asked for a stop at a step boundary.
 * Thread-safety: any thread, concurrently. Blocks: no. */
SIGMA_EXPORT int32_t sigma_session_should_migrate(const sigma_session_t* s);
/* 1 when this worker was retired or the job ended: exit.
 * Thread-safety: any thread, concurrently. Blocks: no. */
SIGMA_EXPORT int32_t sigma_session_ended(const sigma_session_t* s);

/*
 * After any error of a collective or step_end: reports, waits for the next
 * assignment, restores. [in] failed: the status of the call that failed
 * (a HAL collective's or a sigma_* call's; HAL_ERR_DEVICE_LOST has the
 * device replaced without being waited for). [in, optional] reason, for the
 * journal; the agent never reads a code from it. [out] next_step.
 * Errors as sigma_session_join.
 * Thread-safety: the training thread. Blocks: as sigma_session_join.
 */
SIGMA_EXPORT sigma_status_t sigma_session_recover_status(sigma_session_t* s, sigma_status_t failed,
                                                         const char* reason, uint64_t* next_step);
/* As sigma_session_recover_status for a failure whose status is not known:
 * the agent reads its code as unknown.
 * Thread-safety: the training thread. Blocks: as sigma_session_join. */
SIGMA_EXPORT sigma_status_t sigma_session_recover(sigma_session_t* s, const char* reason,
                                                  uint64_t* next_step);

/* Reports the job done on this rank and waits for the agent's goodbye.
 * HAL_ERR_ABORTED: a peer failed before every rank had finished, and this
 * rank's state is needed to restore it: call sigma_session_recover, run the
 * steps from the one it returns, then finish again.
 * Thread-safety: the training thread. Blocks: until the goodbye, or the
 * abort that needs this rank. */
SIGMA_EXPORT sigma_status_t sigma_session_finish(sigma_session_t* s, uint64_t steps_done);

/* What a training loop may tell the agent about a step (the progress line
 * and the job's report). Zero-initialise, set struct_size, then the fields. */
typedef struct sigma_step_report_t {
  uint64_t struct_size;
  int32_t has_loss; /* nonzero: `loss` is the step's loss (NaN allowed) */
  double loss;
  uint64_t tokens;   /* tokens the whole job trained on in this step */
  double flops;      /* model FLOPs of this step, whole job */
  double peak_flops; /* peak FLOP/s of the job's devices */
  const char* note;  /* [optional] a numerics decision worth a line */
} sigma_step_report_t;

#define SIGMA_STEP_REPORT_V1_SIZE (offsetof(sigma_step_report_t, note) + sizeof(const char*))

/* sigma_session_step_end with the step's figures. [in, optional] report:
 * read during the call only; NULL is sigma_session_step_end.
 * Thread-safety: the training thread. Blocks: as sigma_session_step_end. */
SIGMA_EXPORT sigma_status_t sigma_session_step_end_report(sigma_session_t* s, uint64_t step,
                                                          const sigma_step_report_t* report);
/* 1 when the disk checkpoint of `step` is due (step_end saves it).
 * Thread-safety: the training thread. Blocks: no. */
SIGMA_EXPORT int32_t sigma_session_should_checkpoint(const sigma_session_t* s, uint64_t step);
/*
 * A rollback every rank decided alike (the guardrails' loss spike): this
 * rank's own memory-tier snapshot `index` (steps done) back into the state.
 * Not collective. [out] next_step: `index`.
 * Errors: SIGMA_ERR_DATA_LOSS when this rank no longer holds it.
 * Thread-safety: the training thread. Blocks: only on this rank's own copy.
 */
SIGMA_EXPORT sigma_status_t sigma_session_rollback(sigma_session_t* s, uint64_t index, uint64_t* next_step);
/*
 * The same, and the data batches of steps [skip_begin, skip_end) (numbered
 * as before the rollback) are skipped from then on: the windows travel
 * with the state, so a replacement skips them too. Not collective.
 * [out] next_step: `index`.
 * Thread-safety: the training thread. Blocks: only on this rank's own copy.
 */
SIGMA_EXPORT sigma_status_t sigma_session_rollback_skipping(sigma_session_t* s, uint64_t index,
                                                            uint64_t skip_begin, uint64_t skip_end,
                                                            uint64_t* next_step);
/*
 * The data batch of `step`: the step's index moved past the windows
 * rollbacks skipped. [out] batch.
 * Thread-safety: any thread, but not concurrently with a rollback.
 * Blocks: no.
 */
SIGMA_EXPORT sigma_status_t sigma_session_batch_of(const sigma_session_t* s, uint64_t step, uint64_t* batch);

/* ------------------------------------------------------------------------- */
/* Checkpoints (see sigma/checkpoint.hpp for the format and the guarantees)  */
/* ------------------------------------------------------------------------- */

/* A checkpoint engine for one rank (opaque). */
typedef struct sigma_checkpoint_s sigma_checkpoint_t;

/* Zero-initialise, set struct_size = sizeof(sigma_checkpoint_create_args_t),
 * then the fields; a zero field takes its default. */
typedef struct sigma_checkpoint_create_args_t {
  uint64_t struct_size;
  const char* dir;     /* [in] the checkpoint root (created) */
  const char* job;     /* [in, optional] the job's folder below it; NULL: "job" */
  uint32_t rank;       /* this rank */
  uint32_t world;      /* 0: 1 */
  uint32_t keep;       /* newest checkpoints kept; 0: 3 */
  uint32_t base_every; /* a full base every K saves; 0: 8 */
  int32_t zstd_level;  /* 0: 1 */
  /* nonzero: sigma_checkpoint_save returns after copying the state and a
   * background writer persists it; zero: durable on return. */
  int32_t async_save;
  /* Since V2: how chunks are stored. 0: automatic (compressed only where
   * that makes neither the save nor the restore slower on this machine);
   * 1: every chunk zstd-compressed; 2: every chunk raw. A V1 caller (a
   * smaller struct_size) gets automatic. */
  int32_t compression;
} sigma_checkpoint_create_args_t;

#define SIGMA_CHECKPOINT_CREATE_ARGS_V1_SIZE \
  (offsetof(sigma_checkpoint_create_args_t, async_save) + sizeof(int32_t))
#define SIGMA_CHECKPOINT_CREATE_ARGS_V2_SIZE \
  (offsetof(sigma_checkpoint_create_args_t, compression) + sizeof(int32_t))

/*
 * [out] out: owned by the caller until sigma_checkpoint_destroy.
 * Errors: INVALID_ARGUMENT (args, dir NULL, struct_size too small),
 *   UNAVAILABLE (the folder cannot be made; the message names it).
 * Thread-safety: any thread. Blocks: for mkdir.
 */
SIGMA_EXPORT sigma_status_t sigma_checkpoint_create(const sigma_checkpoint_create_args_t* args,
                                                    sigma_checkpoint_t** out);
/* Waits for pending saves (a failure is dropped here: call
 * sigma_checkpoint_wait first to see it), then frees. NULL is accepted.
 * Thread-safety: any thread, no other call on the engine concurrently.
 * Blocks: until the pending saves are durable. */
SIGMA_EXPORT void sigma_checkpoint_destroy(sigma_checkpoint_t* ck);

/*
 * Saves the views as checkpoint `step`, with `extra` (any text, e.g. JSON;
 * NULL for none) given back by restore. The views are read during the call
 * only. Errors: INVALID_ARGUMENT (views), UNAVAILABLE (a write failed, e.g. a
 * full disk: nothing half-written stays, older checkpoints are untouched;
 * with async_save the failure of an earlier save is returned here).
 * Thread-safety: one thread at a time per engine. Blocks: async, for the copy (and for the writer when it is
 * two saves behind); otherwise until durable.
 */
SIGMA_EXPORT sigma_status_t sigma_checkpoint_save(sigma_checkpoint_t* ck, uint64_t step,
                                                  const sigma_state_view_t* views, uint32_t num_views,
                                                  const char* extra);
/* Until every save is durable; returns the first background failure.
 * Thread-safety: one thread at a time per engine. Blocks: until durable. */
SIGMA_EXPORT sigma_status_t sigma_checkpoint_wait(sigma_checkpoint_t* ck);

/*
 * Restores the newest checkpoint at or below `newest_step` (UINT64_MAX: any)
 * that passes every check into the views (their names, dtypes and counts
 * must match what was saved). Damaged newer ones are skipped.
 * [out] step: the step restored.
 * Errors: SIGMA_ERR_DATA_LOSS (none is good, or there is none: the message
 *   says which files failed which check), INVALID_ARGUMENT (a good one does
 *   not match the views).
 * Thread-safety: one thread at a time per engine. Blocks: until read and
 * checked.
 */
SIGMA_EXPORT sigma_status_t sigma_checkpoint_restore(sigma_checkpoint_t* ck, const sigma_state_view_t* views,
                                                     uint32_t num_views, uint64_t newest_step,
                                                     uint64_t* step);
/* The `extra` text of the last restore ("" before one); owned by the
 * engine, valid until its next call. Never NULL for a non-NULL engine.
 * Thread-safety: one thread at a time per engine. Blocks: no. */
SIGMA_EXPORT const char* sigma_checkpoint_extra(const sigma_checkpoint_t* ck);

/* ------------------------------------------------------------------------- */
/* Health monitor (see sigma/health.hpp for the detectors)                   */
/* ------------------------------------------------------------------------- */

/* A health monitor (opaque): observations and a clock in, verdicts out. */
typedef struct sigma_health_s sigma_health_t;

typedef enum sigma_health_state_e {
  SIGMA_HEALTH_HEALTHY = 0,
  SIGMA_HEALTH_SUSPECT = 1,
  SIGMA_HEALTH_FAILING = 2,
  SIGMA_HEALTH_FAILED = 3
} sigma_health_state_t;

/* Zero-initialise, set struct_size, then the thresholds to change; a zero
 * field keeps the default of sigma/health.hpp's Config. */
typedef struct sigma_health_create_args_t {
  uint64_t struct_size;
  double warn_c;              /* temperature: suspect at or above */
  double critical_c;          /* temperature: failing at or above */
  double heartbeat_timeout_s; /* no heartbeat this long: failed */
  double ecc_per_min_suspect; /* correctable ECC errors per minute */
} sigma_health_create_args_t;

#define SIGMA_HEALTH_CREATE_ARGS_V1_SIZE \
  (offsetof(sigma_health_create_args_t, ecc_per_min_suspect) + sizeof(double))

/* One device's health. The caller sets struct_size; `reason` is owned by
 * the library and valid until the calling thread's next sigma_health_query. */
typedef struct sigma_device_health_t {
  uint64_t struct_size;
  int32_t state; /* sigma_health_state_t */
  uint32_t num_warnings;
  double score;       /* 1 healthy .. 0 failed */
  const char* reason; /* the most severe warning's line, "" when none */
} sigma_device_health_t;

#define SIGMA_DEVICE_HEALTH_V1_SIZE (offsetof(sigma_device_health_t, reason) + sizeof(const char*))

/*
 * [in, optional] args: NULL for the defaults. [out] out: owned by the caller
 * until sigma_health_destroy. Errors: INVALID_ARGUMENT (an impossible
 * threshold, named). Thread-safety: any thread. Blocks: no.
 */
SIGMA_EXPORT sigma_status_t sigma_health_create(const sigma_health_create_args_t* args, sigma_health_t** out);
/* NULL is accepted. Thread-safety: any thread, no other call on the monitor
 * concurrently. Blocks: no. */
SIGMA_EXPORT void sigma_health_destroy(sigma_health_t* h);

/* Observations, each at t_s seconds of any clock that does not go back per
 * device. Devices are registered by their first observation.
 * Thread-safety: any thread, concurrently. Blocks: no. */
SIGMA_EXPORT sigma_status_t sigma_health_observe_telemetry(sigma_health_t* h, uint32_t device, double t_s,
                                                           const hal_telemetry_sample_t* samples,
                                                           uint64_t num_samples);
SIGMA_EXPORT sigma_status_t sigma_health_observe_step(sigma_health_t* h, uint32_t device, uint64_t step,
                                                      double step_time_s, double t_s);
SIGMA_EXPORT sigma_status_t sigma_health_observe_heartbeat(sigma_health_t* h, uint32_t device, double t_s);

/* Runs every detector at t_s. [out, optional] num_events: how many warnings
 * were raised or cleared and states changed since the last call.
 * Thread-safety: any thread, concurrently. Blocks: no. */
SIGMA_EXPORT sigma_status_t sigma_health_evaluate(sigma_health_t* h, double t_s, uint32_t* num_events);

/* [out] out: the device's health (struct_size set by the caller).
 * Errors: INVALID_ARGUMENT (a device never observed).
 * Thread-safety: any thread, concurrently. Blocks: no. */
SIGMA_EXPORT sigma_status_t sigma_health_query(sigma_health_t* h, uint32_t device,
                                               sigma_device_health_t* out);

/* ------------------------------------------------------------------------- */
/* Planner (see sigma/planner.hpp and docs/parallel.md)                      */
/* ------------------------------------------------------------------------- */

/*
 * The best layouts for a model on a set of devices: `request_yaml` is what
 * sigma-plan reads (model, devices, framework, efficiency, search); `name`
 * names it in messages ([optional]). top: how many plans (0: the request's).
 * [out] json: sigma-plan --json's object ("plans": best first, each with
 *   its layout, step_s, tokens_per_s, mfu, memory_gib, breakdown_s),
 *   allocated by the library: free it with sigma_free. "plans" is empty
 *   when no layout fits.
 * Errors: INVALID_ARGUMENT ("file:line: key: why" for a malformed request).
 * Thread-safety: any thread, concurrently. Blocks: for the search (pure CPU).
 */
SIGMA_EXPORT sigma_status_t sigma_plan(const char* request_yaml, const char* name, uint32_t top, char** json);

/* Frees memory the library allocated for the caller (sigma_plan's text).
 * NULL is accepted. Thread-safety: any thread. Blocks: no. */
SIGMA_EXPORT void sigma_free(void* p);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SIGMA_SIGMA_H_ */
