// Shared by the C API's files: the per-thread error message and the one
// try/catch every entry point runs its body in.
#pragma once

#include <sigma/sigma.h>
#include <sigma/error.hpp>
#include <sigma/hal.hpp>

#include <sigma/checkpoint.hpp>

#include <string>
#include <vector>

struct sigma_plugin_s {
  sigma::hal::PluginPtr plugin;
};

namespace sigma::capi {

sigma_status_t set_error(sigma_status_t status, std::string message);
void clear_error();

inline hal::PluginPtr plugin_ptr(sigma_plugin_t* p) {
  if (p == nullptr) throw Error(Code::invalid_argument, "plugin is NULL");
  return p->plugin;
}

// The C views of a state as the engines' views (1-D, host memory). Throws
// Error(invalid_argument) naming the view that has no name, no data or an
// unknown dtype.
std::vector<checkpoint::TensorView> state_views(const sigma_state_view_t* views, uint32_t n);

// The C API's status of a code: the HAL's, and SIGMA_ERR_DATA_LOSS for
// damaged or missing state (the HAL has no such status).
inline sigma_status_t status_of(Code code) {
  return code == Code::data_loss ? SIGMA_ERR_DATA_LOSS : to_hal_status(code);
}
// And back: the code of a C API status.
inline Code code_of(sigma_status_t status) {
  return status == SIGMA_ERR_DATA_LOSS ? Code::data_loss : from_hal_status(status);
}

// Runs body; turns whatever it throws into a status and "who: message".
template <typename F>
sigma_status_t guarded(const char* who, F&& body) noexcept {
  try {
    body();
    clear_error();
    return SIGMA_OK;
  } catch (const Error& e) {
    return set_error(status_of(e.code()), std::string(who) + ": " + e.what());
  } catch (const std::exception& e) {
    return set_error(HAL_ERR_INTERNAL, std::string(who) + ": " + e.what());
  } catch (...) {
    return set_error(HAL_ERR_INTERNAL, std::string(who) + ": an exception that is not a std::exception");
  }
}

}  // namespace sigma::capi
