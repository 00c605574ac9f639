// sigma/error.hpp -- the one error type of libsigma's C++ API.
//
// Every fallible C++ entry of libsigma throws sigma::Error. Its code keeps
// apart what the scheduler acts on differently: a timeout is retried or
// escalated, a lost device is replaced, an abort is expected after a peer
// failed, data loss means a checkpoint or buffer cannot be trusted.
#pragma once

#include <sigma/export.hpp>

#include <sigma/hal.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace sigma {

enum class Code : int {
  ok = 0,
  invalid_argument,
  not_supported,
  unavailable,
  device_lost,
  timeout,
  aborted,
  remote_error,
  out_of_memory,
  internal,
  data_loss,
};

// Stable lower-case name of a code ("device_lost"). Thread-safety: any thread.
SIGMA_EXPORT std::string_view code_name(Code code) noexcept;

// The HAL status that a code corresponds to (data_loss maps to INTERNAL).
SIGMA_EXPORT hal_status_t to_hal_status(Code code) noexcept;

// The code of a HAL status; any status that is not defined by ABI 1.0 maps to
// Code::internal. Thread-safety: any thread.
SIGMA_EXPORT Code from_hal_status(hal_status_t status) noexcept;

// The name of a HAL status ("HAL_ERR_TIMEOUT"), or "undefined status N".
SIGMA_EXPORT std::string hal_status_name(hal_status_t status);

// An error with a code and a message that says what failed, where and why.
// Thread-safety: immutable after construction.
class SIGMA_EXPORT Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Code code() const noexcept { return code_; }

 private:
  Code code_;
};

}  // namespace sigma
