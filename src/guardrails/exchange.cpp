#include "exchange.hpp"

#include <cstring>

namespace sigma::guardrails::detail {

Exchange::Exchange(const Group& group, std::chrono::milliseconds timeout) : group_(group), timeout_(timeout) {
  if (group_.world < 1 || group_.rank < 0 || group_.rank >= group_.world)
    throw Error(Code::invalid_argument, "guardrails: group rank " + std::to_string(group_.rank) +
                                            " / world " + std::to_string(group_.world) +
                                            " is not a valid position");
  if (group_.world > 1 && group_.comm == nullptr)
    throw Error(Code::invalid_argument,
                "guardrails: world " + std::to_string(group_.world) + " needs a communicator");
}

std::vector<uint8_t> Exchange::all_gather(const void* mine, uint64_t bytes) {
  const auto world = static_cast<uint64_t>(group_.world), rank = static_cast<uint64_t>(group_.rank);
  std::vector<uint8_t> out(bytes * world);
  if (world == 1) {
    std::memcpy(out.data(), mine, bytes);
    return out;
  }
  if (!buffer_ || buffer_->size() < out.size())
    buffer_ = std::make_unique<hal::Buffer>(group_.comm->plugin(), group_.device, out.size());
  buffer_->copy_from_host(mine, bytes, rank * bytes);
  hal_coll_args_t args{};
  args.struct_size = sizeof(args);
  args.op = HAL_COLL_ALL_GATHER;
  args.dtype = HAL_DTYPE_U8;
  args.count = bytes;
  args.recvbuf = buffer_->data();
  args.sendbuf = static_cast<uint8_t*>(buffer_->data()) + rank * bytes;  // in place
  group_.comm->run(args, timeout_);
  buffer_->copy_to_host(out.data(), out.size());
  return out;
}

}  // namespace sigma::guardrails::detail
