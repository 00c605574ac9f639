#include "checkpoint/view_copy.hpp"

#include <sigma/error.hpp>
#include <sigma/hal.hpp>

#include <algorithm>
#include <cstring>
#include <string>

namespace sigma::checkpoint {

namespace {

void check_size(uint64_t size, const std::vector<TensorView>& views) {
  uint64_t total = 0;
  for (const auto& v : views) total += v.bytes();
  if (total != size)
    throw Error(Code::invalid_argument, "state image: it holds " + std::to_string(size) +
                                            " bytes, the state's views " + std::to_string(total));
}

bool in_device_memory(const TensorView& v) {
  return v.plugin != nullptr && !v.plugin->host_addressable(v.device);
}

}  // namespace

void copy_in(uint8_t* dst, uint64_t size, const std::vector<TensorView>& views) {
  check_size(size, views);
  for (const auto& v : views) {
    const uint64_t n = v.bytes();
    if (n > 0 && in_device_memory(v))
      v.plugin->check(
          v.plugin->api().device->memcpy(v.device, dst, v.data, n, HAL_COPY_DEVICE_TO_HOST, nullptr),
          "memcpy (memory tier snapshot)");
    else if (n > 0)
      std::memcpy(dst, v.data, n);
    dst += n;
  }
}

// Copies bytes [from, from + len) of a snapshot (at `src`) into the views
// that hold them (the views, in order, tile the snapshot).
void copy_in_piece(uint8_t* piece, uint64_t from, uint64_t len, const std::vector<TensorView>& views) {
  uint64_t at = 0;  // where the view starts in the image
  for (const auto& v : views) {
    const uint64_t n = v.bytes(), lo = std::max(at, from), hi = std::min(at + n, from + len);
    if (lo < hi) {
      const auto* src = static_cast<const uint8_t*>(v.data) + (lo - at);
      uint8_t* dst = piece + (lo - from);
      if (in_device_memory(v))
        v.plugin->check(
            v.plugin->api().device->memcpy(v.device, dst, src, hi - lo, HAL_COPY_DEVICE_TO_HOST, nullptr),
            "memcpy (the views into a state image)");
      else
        std::memcpy(dst, src, hi - lo);
    }
    at += n;
  }
}

void copy_out_piece(const uint8_t* piece, uint64_t from, uint64_t len, const std::vector<TensorView>& views) {
  uint64_t at = 0;  // where the view starts in the image
  for (const auto& v : views) {
    const uint64_t n = v.bytes(), lo = std::max(at, from), hi = std::min(at + n, from + len);
    if (lo < hi) {
      auto* dst = static_cast<uint8_t*>(v.data) + (lo - at);
      const uint8_t* src = piece + (lo - from);
      if (in_device_memory(v))
        v.plugin->check(
            v.plugin->api().device->memcpy(v.device, dst, src, hi - lo, HAL_COPY_HOST_TO_DEVICE, nullptr),
            "memcpy (state image into the views)");
      else
        std::memcpy(dst, src, hi - lo);
    }
    at += n;
  }
}

void copy_out_range(const uint8_t* src, uint64_t from, uint64_t len, const std::vector<TensorView>& views) {
  copy_out_piece(src + from, from, len, views);
}

void copy_out(const uint8_t* src, uint64_t size, const std::vector<TensorView>& views) {
  check_size(size, views);
  copy_out_range(src, 0, size, views);
}

}  // namespace sigma::checkpoint
