// RAII owners over the HAL's memory, communicators and requests.
#include <sigma/hal_support.h>
#include <sigma/hal.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace sigma::hal {

Buffer::Buffer(PluginPtr plugin, uint32_t device, uint64_t size_bytes)
    : plugin_(std::move(plugin)), device_(device), size_(size_bytes) {
  plugin_->check(plugin_->device_api().mem_alloc(device_, size_bytes, 0, &ptr_),
                 "hal_device_api_t.mem_alloc");
}

Buffer::~Buffer() {
  if (ptr_ != nullptr) plugin_->device_api().mem_free(device_, ptr_);
}

Buffer::Buffer(Buffer&& other) noexcept
    : plugin_(std::move(other.plugin_)), device_(other.device_), ptr_(other.ptr_), size_(other.size_) {
  other.ptr_ = nullptr;
  other.size_ = 0;
}

void Buffer::copy_from_host(const void* src, uint64_t size_bytes, uint64_t offset) {
  if (offset > size_ || size_bytes > size_ - offset) {
    throw Error(Code::invalid_argument, "Buffer::copy_from_host: range past the buffer's end");
  }
  plugin_->check(plugin_->device_api().memcpy(device_, static_cast<char*>(ptr_) + offset, src, size_bytes,
                                              HAL_COPY_HOST_TO_DEVICE, nullptr),
                 "hal_device_api_t.memcpy");
}

void Buffer::copy_to_host(void* dst, uint64_t size_bytes, uint64_t offset) const {
  if (offset > size_ || size_bytes > size_ - offset) {
    throw Error(Code::invalid_argument, "Buffer::copy_to_host: range past the buffer's end");
  }
  plugin_->check(plugin_->device_api().memcpy(device_, dst, static_cast<const char*>(ptr_) + offset,
                                              size_bytes, HAL_COPY_DEVICE_TO_HOST, nullptr),
                 "hal_device_api_t.memcpy");
}

Communicator::Communicator(PluginPtr plugin, const hal_comm_create_args_t& args)
    : plugin_(std::move(plugin)) {
  if (args.timeout_ns > 0 && args.timeout_ns < UINT64_MAX)
    bound_ = std::chrono::nanoseconds(std::min<uint64_t>(args.timeout_ns, uint64_t{INT64_MAX}));
  plugin_->check(plugin_->coll_api().comm_create(&args, &comm_), "hal_coll_api_t.comm_create");
}

std::unique_ptr<Communicator> Communicator::borrow(PluginPtr plugin, hal_comm_t comm) {
  if (!plugin || comm == nullptr)
    throw Error(Code::invalid_argument, "Communicator::borrow: NULL plugin or comm");
  return std::unique_ptr<Communicator>(new Communicator(std::move(plugin), comm));
}

Communicator::~Communicator() {
  if (comm_ != nullptr && owned_) plugin_->coll_api().comm_destroy(comm_);
}

Request Communicator::post(const hal_coll_args_t& args, hal_stream_t stream) {
  started_.fetch_add(1, std::memory_order_relaxed);
  hal_request_t req = nullptr;
  plugin_->check(plugin_->coll_api().post(comm_, &args, stream, &req), "hal_coll_api_t.post");
  return Request(plugin_, comm_, req, bound_);
}

void Communicator::run(const hal_coll_args_t& args, std::chrono::nanoseconds timeout, hal_stream_t stream) {
  auto timed_out = [&] {
    return Error(Code::timeout, "HAL plugin '" + plugin_->name() + "': " + coll_op_name(args.op) +
                                    " did not finish within " +
                                    std::to_string(std::chrono::duration<double>(timeout).count()) +
                                    " s; the communicator was aborted");
  };
  if (hal_coll_run_fn* run = plugin_->coll_run()) {
    started_.fetch_add(1, std::memory_order_relaxed);  // post() counts the other way
    const uint64_t ns = timeout.count() < 0 ? 0 : static_cast<uint64_t>(timeout.count());
    const hal_status_t st = run(comm_, &args, stream, ns);
    if (st == HAL_ERR_TIMEOUT) throw timed_out();
    plugin_->check(st, "hal_coll_api_t.run");
    return;
  }
  Request req = post(args, stream);
  if (req.wait(timeout)) return;
  abort();
  try {
    req.wait(std::chrono::seconds(5));  // let the aborted operation let go of its buffers
  } catch (const Error&) {
    // Expected: it ends with ABORTED.
  }
  throw timed_out();
}

void Communicator::abort() {
  plugin_->check(plugin_->coll_api().comm_abort(comm_), "hal_coll_api_t.comm_abort");
}

hal_status_t Communicator::async_error() const {
  hal_status_t err = HAL_OK;
  plugin_->check(plugin_->coll_api().comm_get_async_error(comm_, &err),
                 "hal_coll_api_t.comm_get_async_error");
  return err;
}

Request::Request(Request&& other) noexcept
    : plugin_(std::move(other.plugin_)), comm_(other.comm_), req_(other.req_), bound_(other.bound_) {
  other.req_ = nullptr;
}

Request::~Request() {
  if (req_ == nullptr) return;
  const hal_coll_api_t& c = plugin_->coll_api();
  const auto ns = static_cast<uint64_t>(std::max<int64_t>(1, bound_.count()));
  hal_status_t st = c.wait(req_, ns);
  if (st == HAL_ERR_TIMEOUT || st == HAL_IN_PROGRESS) {
    // The buffers may be freed right after us: make the plugin stop using
    // them. Aborting the communicator is drastic, but a request that outlives
    // its owner past its bound is already a hang.
    c.comm_abort(comm_);
    st = c.wait(req_, ns);
    if (st == HAL_ERR_TIMEOUT || st == HAL_IN_PROGRESS) {
      // It ignores abort: freeing it under the plugin is unsafe and waiting
      // again would hang the host. Abandoned (leaked), said once.
      std::fprintf(stderr,
                   "sigma: HAL plugin '%s': a request was still running %.3g s after comm_abort and is "
                   "abandoned (the plugin ignores abort: a plugin bug)\n",
                   plugin_->path().c_str(), static_cast<double>(ns) * 1e-9);
      return;
    }
  }
  c.request_free(req_);
}

bool Request::test() {
  return plugin_->check(plugin_->coll_api().test(req_), "hal_coll_api_t.test", true) == HAL_OK;
}

bool Request::wait(std::chrono::nanoseconds timeout) {
  const uint64_t ns = timeout.count() < 0 ? 0 : static_cast<uint64_t>(timeout.count());
  hal_status_t st = plugin_->coll_api().wait(req_, ns);
  if (st == HAL_IN_PROGRESS && ns > 0) {
    throw Error(Code::internal, "HAL plugin '" + plugin_->path() +
                                    "': hal_coll_api_t.wait returned HAL_IN_PROGRESS after a timeout of " +
                                    std::to_string(ns) + " ns; ABI 1 says HAL_ERR_TIMEOUT (plugin bug)");
  }
  if (st == HAL_ERR_TIMEOUT || st == HAL_IN_PROGRESS) return false;
  plugin_->check(st, "hal_coll_api_t.wait");
  return true;
}

uint64_t dtype_size(hal_dtype_t dtype) noexcept { return hal_dtype_size(dtype); }

double element_as_double(const void* element, hal_dtype_t dtype) noexcept {
  const auto* p = static_cast<const uint8_t*>(element);
  const auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (dtype) {
    case HAL_DTYPE_F32:
      return load(float{});
    case HAL_DTYPE_F64:
      return load(double{});
    case HAL_DTYPE_F16: {  // binary16 by hand: not every compiler has _Float16
      const uint16_t h = load(uint16_t{});
      const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
      const double mag = e == 0    ? std::ldexp(m, -24)
                         : e == 31 ? (m ? NAN : INFINITY)
                                   : std::ldexp(1024 + m, e - 25);
      return h & 0x8000 ? -mag : mag;
    }
    case HAL_DTYPE_BF16: {
      const uint32_t x = static_cast<uint32_t>(load(uint16_t{})) << 16;
      float f;
      std::memcpy(&f, &x, 4);
      return f;
    }
    case HAL_DTYPE_I32:
      return load(int32_t{});
    case HAL_DTYPE_I64:
      return static_cast<double>(load(int64_t{}));
    case HAL_DTYPE_U8:
      return *p;
    default:
      return NAN;
  }
}

std::string dtype_name(hal_dtype_t dtype) {
  static const char* names[] = {"f32", "f16", "bf16", "f64", "i32", "i64", "u8"};
  return dtype < HAL_DTYPE_COUNT_V1 ? names[dtype] : "dtype " + std::to_string(dtype);
}

std::string coll_op_name(hal_coll_op_t op) {
  static const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_allv",
                                "broadcast",  "barrier",    "send",           "recv"};
  return op < HAL_COLL_OP_COUNT_V1 ? names[op] : "op " + std::to_string(op);
}

std::string reduce_op_name(hal_reduce_op_t op) {
  static const char* names[] = {"sum", "prod", "min", "max", "avg"};
  return op < HAL_REDUCE_COUNT_V1 ? names[op] : "reduce " + std::to_string(op);
}

}  // namespace sigma::hal
