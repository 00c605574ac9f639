/*
 * sigma/sigma.h -- the C API of libsigma, for callers in any language.
 *
 * C99. Every function returns a sigma_status_t with the same values as the
 * HAL's statuses (SIGMA_OK = HAL_OK, negatives are HAL_ERR_*); after a failure
 * sigma_last_error() gives the calling thread's message. Nothing is thrown
 * across this boundary.
 */
#ifndef SIGMA_SIGMA_H_
#define SIGMA_SIGMA_H_

#include <sigma/hal.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t sigma_status_t;
#define SIGMA_OK HAL_OK

/* A loaded, initialised HAL plugin (opaque). */
typedef struct sigma_plugin_s sigma_plugin_t;

/*
 * The library's version, "MAJOR.MINOR.PATCH". Static string, never NULL.
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
const char *sigma_version(void);

/*
 * The message of the last failing sigma_* call on the calling thread, or "".
 * Never NULL; valid until the thread's next sigma_* call.
 * Thread-safety: any thread, concurrently (each thread sees its own).
 */
const char *sigma_last_error(void);

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
sigma_status_t sigma_plugin_load(const char *name_or_path, const char *options,
                                 sigma_plugin_t **plugin);

/*
 * Finalises and unloads. NULL is accepted. Every handle obtained through the
 * plugin's tables becomes invalid.
 * Thread-safety: any thread, not concurrently on the same plugin.
 */
void sigma_plugin_unload(sigma_plugin_t *plugin);

/*
 * The plugin's validated root table, owned by the plugin, valid until
 * sigma_plugin_unload. NULL when plugin is NULL.
 * Thread-safety: any thread, concurrently. Blocks: no.
 */
const hal_api_t *sigma_plugin_api(const sigma_plugin_t *plugin);

/*
 * The file the plugin was loaded from; owned by the plugin object, valid
 * until sigma_plugin_unload. NULL when plugin is NULL.
 */
const char *sigma_plugin_path(const sigma_plugin_t *plugin);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SIGMA_SIGMA_H_ */
