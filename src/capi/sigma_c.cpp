// The C API: sigma.h over the C++ loader. Catches everything at the boundary.
#include "capi.hpp"

#include <string>
#include <vector>

namespace {
thread_local std::string t_error;
}  // namespace

namespace sigma::capi {
sigma_status_t set_error(sigma_status_t status, std::string message) {
  t_error = std::move(message);
  return status;
}
void clear_error() { t_error.clear(); }

std::vector<checkpoint::TensorView> state_views(const sigma_state_view_t* views, uint32_t n) {
  if (n > 0 && views == nullptr) throw Error(Code::invalid_argument, "views is NULL");
  std::vector<checkpoint::TensorView> v;
  v.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (views[i].name == nullptr || (views[i].count > 0 && views[i].data == nullptr))
      throw Error(Code::invalid_argument, "view " + std::to_string(i) + " has no name or no data");
    if (hal::dtype_size(views[i].dtype) == 0)
      throw Error(Code::invalid_argument, "view " + std::to_string(i) + " has an unknown dtype");
    v.emplace_back(views[i].name, views[i].dtype, std::vector<int64_t>{static_cast<int64_t>(views[i].count)},
                   views[i].data);
  }
  return v;
}
}  // namespace sigma::capi

using sigma::capi::set_error;

extern "C" {

const char* sigma_version(void) { return SIGMA_VERSION_STRING; }

const char* sigma_last_error(void) { return t_error.c_str(); }

const char* sigma_status_name(sigma_status_t status) {
  if (status == SIGMA_ERR_DATA_LOSS) return "SIGMA_ERR_DATA_LOSS";
  if (status == SIGMA_OK) return "SIGMA_OK";
  if (status < HAL_ERR_MIN_V1 || status > HAL_IN_PROGRESS) return "undefined status";
  // The HAL's own names, kept for the life of the process.
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (hal_status_t st = HAL_ERR_MIN_V1; st <= HAL_IN_PROGRESS; ++st)
      v.push_back(sigma::hal_status_name(st));
    return v;
  }();
  return names[static_cast<size_t>(status - HAL_ERR_MIN_V1)].c_str();
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
