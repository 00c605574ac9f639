// Is there a GPU to run on, none, or one that is broken? The three answers
// are kept apart on purpose: "no device" is a machine without a GPU (the
// vendor is UNAVAILABLE and tests skip), while a GPU machine whose driver or
// runtime fails is a fault to report (the vendor fails with INTERNAL and
// tests fail), never a skip.
//
// Header-only so the vendor and its tests classify the same way. Calls
// cudaGetDeviceCount; may be called from any thread.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

namespace sigma_cuda {

enum class Presence { none, usable, broken };

struct GpuPresence {
  Presence presence = Presence::none;
  int count = 0;
  std::string why;  // for none and broken: what CUDA said
};

inline GpuPresence probe_gpu() {
  GpuPresence g;
  const cudaError_t e = cudaGetDeviceCount(&g.count);
  if (e == cudaSuccess) {
    g.presence = g.count > 0 ? Presence::usable : Presence::none;
    if (g.count == 0) g.why = "cudaGetDeviceCount found 0 devices";
    return g;
  }
  cudaGetLastError();
  g.count = 0;
  g.why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  // No device, or no driver installed at all (the runtime then reports an
  // insufficient driver, yet there is no libcuda to be insufficient): a
  // machine without a GPU. A driver that is there and fails is broken.
  bool driver_installed = false;
  if (e == cudaErrorInsufficientDriver) {
    if (void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
      driver_installed = true;
      ::dlclose(h);
    }
  }
  const bool no_gpu = e == cudaErrorNoDevice || (e == cudaErrorInsufficientDriver && !driver_installed);
  g.presence = no_gpu ? Presence::none : Presence::broken;
  return g;
}

}  // namespace sigma_cuda
