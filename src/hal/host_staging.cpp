// Host collectives through one kept HAL buffer.
#include <sigma/host_staging.hpp>

#include <string>
#include <utility>

namespace sigma::hal {

namespace {

void check(hal_dtype_t dtype, hal_reduce_op_t op) {
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= HAL_DTYPE_COUNT_V1)
    throw Error(Code::invalid_argument,
                "host staging: dtype " + std::to_string(dtype) + " is not a HAL dtype");
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= HAL_REDUCE_COUNT_V1)
    throw Error(Code::invalid_argument, "host staging: reduce op " + std::to_string(op) + " is not a HAL op");
}

}  // namespace

HostStaging::HostStaging(PluginPtr plugin, uint32_t device) : plugin_(std::move(plugin)), device_(device) {}

HostStaging::~HostStaging() = default;

uint64_t HostStaging::capacity() const noexcept { return buf_ ? buf_->size() : 0; }

void HostStaging::release() noexcept { buf_.reset(); }

void* HostStaging::stage(uint64_t bytes) {
  if (!buf_ || buf_->size() < bytes) {
    buf_.reset();  // the old memory goes before the new is taken
    buf_ = std::make_unique<Buffer>(plugin_, device_, bytes);
  }
  return buf_->data();
}

void HostStaging::all_reduce(Communicator& comm, void* data, uint64_t count, hal_dtype_t dtype,
                             hal_reduce_op_t op, std::chrono::nanoseconds timeout) {
  check(dtype, op);
  const uint64_t bytes = count * dtype_size(dtype);
  if (bytes == 0) return;
  void* dev = stage(bytes);
  buf_->copy_from_host(data, bytes);
  comm.run(coll_args(HAL_COLL_ALL_REDUCE, dtype, count, dev, dev, op), timeout);
  buf_->copy_to_host(data, bytes);
}

void HostStaging::broadcast(Communicator& comm, void* data, uint64_t count, hal_dtype_t dtype, uint32_t root,
                            std::chrono::nanoseconds timeout) {
  check(dtype, HAL_REDUCE_SUM);
  const uint64_t bytes = count * dtype_size(dtype);
  if (bytes == 0) return;
  void* dev = stage(bytes);
  buf_->copy_from_host(data, bytes);
  comm.run(coll_args(HAL_COLL_BROADCAST, dtype, count, dev, dev, HAL_REDUCE_SUM, root), timeout);
  buf_->copy_to_host(data, bytes);
}

void HostStaging::all_gather(Communicator& comm, void* data, uint64_t count, hal_dtype_t dtype, uint32_t rank,
                             uint32_t world, std::chrono::nanoseconds timeout) {
  check(dtype, HAL_REDUCE_SUM);
  if (rank >= world)
    throw Error(Code::invalid_argument, "host staging: rank " + std::to_string(rank) +
                                            " is not a rank of world " + std::to_string(world));
  const uint64_t own = count * dtype_size(dtype), bytes = own * world;
  if (bytes == 0) return;
  auto* dev = static_cast<uint8_t*>(stage(bytes));
  const uint64_t at = own * rank;
  buf_->copy_from_host(static_cast<uint8_t*>(data) + at, own, at);
  comm.run(coll_args(HAL_COLL_ALL_GATHER, dtype, count, dev + at, dev), timeout);
  buf_->copy_to_host(data, bytes);
}

}  // namespace sigma::hal
