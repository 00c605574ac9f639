// The C API: sigma.h over the C++ loader. Catches everything at the boundary.
#include "capi.hpp"

#include <string>

namespace {
thread_local std::string t_error;
}  // namespace

namespace sigma::capi {
sigma_status_t set_error(sigma_status_t status, std::string message) {
  t_error = std::move(message);
  return status;
}
void clear_error() { t_error.clear(); }
}  // namespace sigma::capi

using sigma::capi::set_error;

extern "C" {

const char* sigma_version(void) { return SIGMA_VERSION_STRING; }

const char* sigma_last_error(void) { return t_error.c_str(); }

const char* sigma_status_name(sigma_status_t status) {
  if (status == SIGMA_ERR_DATA_LOSS) return "SIGMA_ERR_DATA_LOSS";
  switch (status) {
    case HAL_OK:
      return "SIGMA_OK";
    case HAL_IN_PROGRESS:
      return "HAL_IN_PROGRESS";
    case HAL_ERR_INVALID_ARGUMENT:
      return "HAL_ERR_INVALID_ARGUMENT";
    case HAL_ERR_NOT_SUPPORTED:
      return "HAL_ERR_NOT_SUPPORTED";
    case HAL_ERR_UNAVAILABLE:
      return "HAL_ERR_UNAVAILABLE";
    case HAL_ERR_DEVICE_LOST:
      return "HAL_ERR_DEVICE_LOST";
    case HAL_ERR_TIMEOUT:
      return "HAL_ERR_TIMEOUT";
    case HAL_ERR_ABORTED:
      return "HAL_ERR_ABORTED";
    case HAL_ERR_REMOTE_ERROR:
      return "HAL_ERR_REMOTE_ERROR";
    case HAL_ERR_OUT_OF_MEMORY:
      return "HAL_ERR_OUT_OF_MEMORY";
    case HAL_ERR_INTERNAL:
      return "HAL_ERR_INTERNAL";
    default:
      return "undefined status";
  }
}

sigma_status_t sigma_plugin_load(const char* name_or_path, const char* options, sigma_plugin_t** plugin) {
  return sigma::capi::guarded("sigma_plugin_load", [&] {
    if (name_or_path == nullptr || plugin == nullptr)
      throw sigma::Error(sigma::Code::invalid_argument, "name_or_path or plugin is NULL");
    sigma::hal::LoadOptions opts;
    if (options != nullptr) opts.options = options;
    auto p = sigma::hal::Plugin::load(name_or_path, opts);
    *plugin = new sigma_plugin_s{std::move(p)};
  });
}

void sigma_plugin_unload(sigma_plugin_t* plugin) { delete plugin; }

const hal_api_t* sigma_plugin_api(const sigma_plugin_t* plugin) {
  return plugin ? &plugin->plugin->api() : nullptr;
}

const char* sigma_plugin_path(const sigma_plugin_t* plugin) {
  return plugin ? plugin->plugin->path().c_str() : nullptr;
}

}  // extern "C"
