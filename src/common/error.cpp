#include <sigma/error.hpp>

namespace sigma {

std::string_view code_name(Code code) noexcept {
  switch (code) {
    case Code::ok:
      return "ok";
    case Code::invalid_argument:
      return "invalid_argument";
    case Code::not_supported:
      return "not_supported";
    case Code::unavailable:
      return "unavailable";
    case Code::device_lost:
      return "device_lost";
    case Code::timeout:
      return "timeout";
    case Code::aborted:
      return "aborted";
    case Code::remote_error:
      return "remote_error";
    case Code::out_of_memory:
      return "out_of_memory";
    case Code::internal:
      return "internal";
    case Code::data_loss:
      return "data_loss";
  }
  return "unknown";
}

hal_status_t to_hal_status(Code code) noexcept {
  switch (code) {
    case Code::ok:
      return HAL_OK;
    case Code::invalid_argument:
      return HAL_ERR_INVALID_ARGUMENT;
    case Code::not_supported:
      return HAL_ERR_NOT_SUPPORTED;
    case Code::unavailable:
      return HAL_ERR_UNAVAILABLE;
    case Code::device_lost:
      return HAL_ERR_DEVICE_LOST;
    case Code::timeout:
      return HAL_ERR_TIMEOUT;
    case Code::aborted:
      return HAL_ERR_ABORTED;
    case Code::remote_error:
      return HAL_ERR_REMOTE_ERROR;
    case Code::out_of_memory:
      return HAL_ERR_OUT_OF_MEMORY;
    case Code::internal:
    case Code::data_loss:
      return HAL_ERR_INTERNAL;
  }
  return HAL_ERR_INTERNAL;
}

Code from_hal_status(hal_status_t status) noexcept {
  switch (status) {
    case HAL_OK:
      return Code::ok;
    case HAL_ERR_INVALID_ARGUMENT:
      return Code::invalid_argument;
    case HAL_ERR_NOT_SUPPORTED:
      return Code::not_supported;
    case HAL_ERR_UNAVAILABLE:
      return Code::unavailable;
    case HAL_ERR_DEVICE_LOST:
      return Code::device_lost;
    case HAL_ERR_TIMEOUT:
      return Code::timeout;
    case HAL_ERR_ABORTED:
      return Code::aborted;
    case HAL_ERR_REMOTE_ERROR:
      return Code::remote_error;
    case HAL_ERR_OUT_OF_MEMORY:
      return Code::out_of_memory;
    default:
      return Code::internal;
  }
}

std::string hal_status_name(hal_status_t status) {
  switch (status) {
    case HAL_OK:
      return "HAL_OK";
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
      return "undefined status " + std::to_string(status);
  }
}

}  // namespace sigma
