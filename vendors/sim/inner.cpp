// Loading the wrapped vendor: search, dlopen, handshake, and the checks of
// the HAL's companion header (hal_check_api) before its init.
#include "sim.hpp"

#include <sigma/hal_support.h>

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace sim_vendor {
namespace {

std::string own_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&load_inner), &info) == 0 || info.dli_fname == nullptr) return {};
  return std::filesystem::path(info.dli_fname).parent_path().string();
}

}  // namespace

hal_status_t load_inner(const std::string& name, const std::string& options, Inner& out) {
  const std::string file = "libsigma_hal_" + name + ".so";
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("SIGMA_HAL_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string d;
    while (std::getline(ss, d, ':'))
      if (!d.empty()) dirs.push_back(d);
  }
  dirs.push_back(own_dir());
  std::string path, searched;
  for (const auto& d : dirs) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(d + "/" + file, ec)) {
      path = d + "/" + file;
      break;
    }
    searched += (searched.empty() ? "" : ", ") + d;
  }
  if (path.empty())
    return fail(HAL_ERR_UNAVAILABLE,
                "sim: inner vendor '" + name + "' not found: no " + file + " in [" + searched + "]");
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr)
    return fail(HAL_ERR_UNAVAILABLE, "sim: cannot load inner vendor '" + path + "': " + ::dlerror());
  auto* get = reinterpret_cast<hal_get_api_v1_fn*>(::dlsym(h, HAL_GET_API_V1_SYMBOL));
  const hal_api_t* api = get ? get(HAL_ABI_MAJOR, HAL_ABI_MINOR) : nullptr;
  char why[256] = "its hal_get_api_v1 is missing or returned NULL";
  if (get == nullptr || hal_check_api(api, why, sizeof why) != 0) {
    ::dlclose(h);
    return fail(HAL_ERR_UNAVAILABLE, "sim: inner vendor '" + path + "' is not a HAL ABI 1.x plugin: " + why);
  }
  if (std::string(api->name) == "sim") {
    ::dlclose(h);
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: the sim vendor cannot wrap itself");
  }
  hal_init_args_t args{};
  args.struct_size = sizeof(args);
  args.options = options.c_str();
  if (hal_status_t st = api->init(&args); st != HAL_OK) {
    std::string why = api->get_last_error();
    ::dlclose(h);
    return fail(st < 0 ? st : HAL_ERR_INTERNAL, "sim: inner vendor '" + name + "' init failed: " + why);
  }
  out.handle = h;
  out.api = api;
  out.path = path;
  return HAL_OK;
}

void unload_inner(Inner& inner) {
  if (inner.api) inner.api->finalize();
  if (inner.handle) ::dlclose(inner.handle);
  inner = Inner{};
}

}  // namespace sim_vendor
