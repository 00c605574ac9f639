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

sigma_status_t sigma_plugin_load(const char* name_or_path, const char* options, sigma_plugin_t** plugin) {
  if (name_or_path == nullptr || plugin == nullptr) {
    return set_error(HAL_ERR_INVALID_ARGUMENT, "sigma_plugin_load: name_or_path or plugin is NULL");
  }
  try {
    sigma::hal::LoadOptions opts;
    if (options != nullptr) opts.options = options;
    auto p = sigma::hal::Plugin::load(name_or_path, opts);
    *plugin = new sigma_plugin_s{std::move(p)};
    t_error.clear();
    return SIGMA_OK;
  } catch (const sigma::Error& e) {
    return set_error(sigma::to_hal_status(e.code()), e.what());
  } catch (const std::exception& e) {
    return set_error(HAL_ERR_INTERNAL, e.what());
  }
}

void sigma_plugin_unload(sigma_plugin_t* plugin) { delete plugin; }

const hal_api_t* sigma_plugin_api(const sigma_plugin_t* plugin) {
  return plugin ? &plugin->plugin->api() : nullptr;
}

const char* sigma_plugin_path(const sigma_plugin_t* plugin) {
  return plugin ? plugin->plugin->path().c_str() : nullptr;
}

}  // extern "C"
