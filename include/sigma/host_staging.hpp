// sigma/host_staging.hpp -- collectives on host memory over any
// communicator, staged through one HAL buffer of the device that is kept
// and reused: a training step's collectives allocate nothing. The buffer
// grows to the largest call seen and is released with the object.
//
//   sigma::hal::HostStaging staging(plugin);
//   staging.all_reduce(comm, grads.data(), grads.size(), HAL_DTYPE_F32,
//                      HAL_REDUCE_SUM, std::chrono::seconds(60));
//
// Errors are the communicator's (hal::Communicator::run): a timeout aborts
// it. Arguments the HAL would refuse (an unknown dtype or reduce op, a
// root outside the world) throw Error(invalid_argument) before anything
// runs.
//
// Thread-safety: one thread at a time (the training loop's). Not copyable.
#pragma once

#include <sigma/export.hpp>
#include <sigma/hal.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

namespace sigma::hal {

class SIGMA_EXPORT HostStaging {
 public:
  // Staging memory on `device` of `plugin`, allocated at the first call.
  explicit HostStaging(PluginPtr plugin, uint32_t device = 0);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // In place over every rank of `comm`: `count` elements at `data`.
  void all_reduce(Communicator& comm, void* data, uint64_t count, hal_dtype_t dtype, hal_reduce_op_t op,
                  std::chrono::nanoseconds timeout);
  // In place: every rank gets `root`'s `count` elements (a root outside the
  // world is the plugin's invalid_argument).
  void broadcast(Communicator& comm, void* data, uint64_t count, hal_dtype_t dtype, uint32_t root,
                 std::chrono::nanoseconds timeout);
  // `data` holds `world` × `count` elements, this rank's at rank × count;
  // afterwards every rank's are in place.
  void all_gather(Communicator& comm, void* data, uint64_t count, hal_dtype_t dtype, uint32_t rank,
                  uint32_t world, std::chrono::nanoseconds timeout);

  // Bytes held for staging now (0 before the first call).
  uint64_t capacity() const noexcept;
  // Lets the memory go (a new communicator on another device's plugin, or
  // after an abort when the plugin may still hold the old buffer).
  void release() noexcept;

 private:
  void* stage(uint64_t bytes);
  PluginPtr plugin_;
  uint32_t device_;
  std::unique_ptr<Buffer> buf_;
};

}  // namespace sigma::hal
