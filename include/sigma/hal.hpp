// sigma/hal.hpp -- loading HAL plugins, and RAII owners over the C ABI.
//
// The loader finds a plugin by path or short name, checks its handshake and
// tables against ABI 1.0, and initialises it. The classes below own what the
// plugin hands out (devices' memory, communicators, requests) and turn every
// status into sigma::Error with the plugin's name, the entry and its message.
#pragma once

#include <sigma/export.hpp>

#include <sigma/hal.h>
#include <sigma/error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sigma::hal {

struct LoadOptions {
  std::string options;  // hal_init_args_t.options (vendor-specific)
  std::string job_dir;  // hal_init_args_t.job_dir
};

// Where a short name is searched, in order: each folder of
// SIGMA_HAL_PLUGIN_PATH (colon-separated), then <libdir>/sigma/plugins beside
// the libsigma in use. A short name N is the file libsigma_hal_N.so.
SIGMA_EXPORT std::vector<std::string> plugin_search_path();

// The file a name or path resolves to. A value containing '/' or ending in
// ".so" is a path and is used as given. Throws Error(unavailable) naming every
// folder searched when a short name is not found.
SIGMA_EXPORT std::string resolve_plugin(const std::string& name_or_path);

// Checks a root table against ABI 1.0: major, struct sizes of the root and
// each sub-table, required entries non-NULL, strings present, extension chain
// well formed. Returns "" when it is valid, else one message naming the field,
// what was expected and what was found. `origin` prefixes the message.
SIGMA_EXPORT std::string validate_api(const hal_api_t* api, const std::string& origin);

// Thrown by Plugin::load when the plugin loaded and validated but its own
// hal_init_fn refused (e.g. UNAVAILABLE: no device on this machine). Callers
// that report "skipped: no device" rather than "failed" catch this type.
class SIGMA_EXPORT PluginInitError : public Error {
 public:
  using Error::Error;
};

class Plugin;
using PluginPtr = std::shared_ptr<Plugin>;

// A loaded, initialised plugin. Destroying the last reference finalises the
// plugin and unloads the shared object. Loading the same file twice gives two
// Plugin objects over one reference-counted plugin, as the ABI requires.
// Thread-safety: the methods are as thread-safe as the entries they call.
class SIGMA_EXPORT Plugin {
 public:
  // Loads, validates and initialises. Throws Error naming the file and what is
  // wrong: unavailable (dlopen failed, file not found, init said so),
  // invalid_argument (the table breaks the ABI), not_supported (wrong major).
  // An explicitly requested plugin that fails is never replaced by another.
  static PluginPtr load(const std::string& name_or_path, const LoadOptions& options = {});

  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const hal_api_t& api() const { return *api_; }
  const hal_device_api_t& device_api() const { return *api_->device; }
  const hal_telemetry_api_t& telemetry_api() const { return *api_->telemetry; }
  const hal_coll_api_t& coll_api() const { return *api_->coll; }
  // hal_coll_api_t.run (ABI 1.1), or nullptr when the plugin has none: a
  // table of 1.0's frozen size (HAL_COLL_API_V1_0_SIZE) ends before it.
  hal_coll_run_fn* coll_run() const {
    return api_->coll->struct_size >= HAL_COLL_API_V1_1_SIZE ? api_->coll->run : nullptr;
  }
  const std::string& path() const { return path_; }
  std::string name() const { return api_->name; }
  bool has_streams() const;
  // The fault-injection extension, or nullptr when the plugin has none.
  const hal_ext_fault_injection_t* fault_injection() const;
  // ": <the plugin's last message>" for an error text, bounded to 4 KiB;
  // names a NULL message as the plugin bug it is; "" when there is none.
  std::string last_message() const;
  // The device-kernels extension in 1.3's form (entries take args structs),
  // or nullptr when the plugin has none or declares an earlier minor. Read
  // an entry only when struct_size covers it (HAL_HAS_FIELD); KernelEntries
  // does, and calls a 1.2 plugin's entries too.
  const hal_ext_kernels_t* kernels() const;
  // A 1.2 plugin's extension (positional entries), or nullptr otherwise.
  const hal_ext_kernels_v1_2_t* kernels_v1_2() const;
  // Whether the host may read and write `device`'s memory through its
  // pointers (HAL_CAP_HOST_MEMORY, or a memory_kind other than device).
  // The one answer every engine asks before touching a buffer; asked of
  // the plugin once per device, then remembered (a device's memory kind
  // does not change, and get_props can take milliseconds).
  bool host_addressable(uint32_t device) const;

  // Throws Error when `status` is an error or not a status ABI 1.0 defines
  // (HAL_IN_PROGRESS too, unless allow_in_progress). `entry` names the call,
  // e.g. "hal_device_api_t.mem_alloc". Returns the status otherwise.
  hal_status_t check(hal_status_t status, const char* entry, bool allow_in_progress = false) const;

  uint32_t device_count() const;
  hal_device_props_t device_props(uint32_t device) const;
  std::vector<hal_field_info_t> telemetry_fields(uint32_t device) const;
  std::vector<hal_telemetry_sample_t> read_telemetry(uint32_t device,
                                                     const std::vector<hal_field_id_t>& ids) const;
  hal_self_test_result_t self_test(uint32_t device, uint64_t budget_bytes = 0) const;

 private:
  Plugin() = default;
  void* handle_ = nullptr;
  const hal_api_t* api_ = nullptr;
  std::string path_;
  mutable std::mutex addressable_mu_;
  mutable std::vector<int8_t> addressable_;  // per device: -1 not asked yet, else 0/1
};

// Device memory from hal_mem_alloc_fn; freed when destroyed.
// Thread-safety: not concurrently on the same Buffer.
class SIGMA_EXPORT Buffer {
 public:
  Buffer(PluginPtr plugin, uint32_t device, uint64_t size_bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&&) = delete;
  Buffer(const Buffer&) = delete;
  void* data() const { return ptr_; }
  uint64_t size() const { return size_; }
  void copy_from_host(const void* src, uint64_t size_bytes, uint64_t offset = 0);
  void copy_to_host(void* dst, uint64_t size_bytes, uint64_t offset = 0) const;

 private:
  PluginPtr plugin_;
  uint32_t device_;
  void* ptr_ = nullptr;
  uint64_t size_ = 0;
};

class Request;

// A communicator. Its bootstrap table must outlive it (see bootstrap.hpp).
// Destroying it destroys the communicator (aborting what is in flight).
// Thread-safety: post() not concurrently on the same Communicator; abort()
// and async_error() from any thread, concurrently.
class SIGMA_EXPORT Communicator {
 public:
  // Collective over all ranks. Throws Error (timeout when peers did not come,
  // not_supported for a world size the plugin cannot do, ...).
  Communicator(PluginPtr plugin, const hal_comm_create_args_t& args);
  // Wraps a communicator the caller created through the plugin's table (the
  // C API's users) without taking it over: destroying this object leaves
  // `comm` alive. The caller keeps it alive while this object exists.
  static std::unique_ptr<Communicator> borrow(PluginPtr plugin, hal_comm_t comm);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  Request post(const hal_coll_args_t& args, hal_stream_t stream = nullptr);
  // Blocking helper: runs the operation and waits at most `timeout`, through
  // the plugin's hal_coll_api_t.run where it has one (on the calling thread,
  // for a blocking transport), else by posting and waiting. An operation that
  // overruns its bound means a hung peer on early-life hardware, so on
  // timeout the communicator is aborted (it can then only be destroyed) and
  // Error(timeout) is thrown; async_error() then reads TIMEOUT where the
  // plugin's run aborted it, ABORTED where this helper did. Other failures
  // throw their own code.
  void run(const hal_coll_args_t& args, std::chrono::nanoseconds timeout, hal_stream_t stream = nullptr);
  void abort();
  hal_status_t async_error() const;
  hal_comm_t handle() const { return comm_; }
  const PluginPtr& plugin() const { return plugin_; }
  // How many operations post() and run() have started here, counting one
  // that failed: a member's place in its group's sequence of collectives
  // (every member starts the same ones in the same order), which tells
  // whose peers wait for whom after a failure. Any thread.
  uint64_t operations_started() const { return started_.load(std::memory_order_relaxed); }

 private:
  Communicator(PluginPtr plugin, hal_comm_t comm) : plugin_(std::move(plugin)), comm_(comm), owned_(false) {}
  PluginPtr plugin_;
  hal_comm_t comm_ = nullptr;
  bool owned_ = true;
  std::chrono::nanoseconds bound_ = std::chrono::seconds(10);  // from the create args' timeout
  std::atomic<uint64_t> started_{0};
};

// One posted operation. Destroying an unfinished request waits for it up to
// `bound` (the communicator's timeout from its create args, else 10 s); if
// it is still not done, the communicator is aborted so the buffers are no
// longer used, and the abort gets the same bound. A request that outlives
// even that (a plugin that ignores abort) is abandoned, never freed or
// waited on again, and said so once on stderr: the host goes on.
class SIGMA_EXPORT Request {
 public:
  Request(PluginPtr plugin, hal_comm_t comm, hal_request_t req,
          std::chrono::nanoseconds bound = std::chrono::seconds(10))
      : plugin_(std::move(plugin)), comm_(comm), req_(req), bound_(bound) {}
  ~Request();
  Request(Request&& other) noexcept;
  Request& operator=(Request&&) = delete;
  Request(const Request&) = delete;

  // True when finished well; false when still running; throws Error when it
  // finished with an error.
  bool test();
  // True when finished well within `timeout`, false when time ran out; throws
  // Error when it finished with an error (aborted, remote_error, ...), and
  // Error(internal) for IN_PROGRESS after a non-zero timeout (the ABI says
  // TIMEOUT: a plugin bug).
  bool wait(std::chrono::nanoseconds timeout);
  hal_request_t handle() const { return req_; }

 private:
  PluginPtr plugin_;
  hal_comm_t comm_;
  hal_request_t req_ = nullptr;
  std::chrono::nanoseconds bound_;
};

// A plugin's device kernels (HAL_EXT_KERNELS) whatever minor it declared:
// a 1.3 plugin's entries are called with their args structs, a 1.2
// plugin's positional entries through this adapter, keyed on its minor. An
// entry the plugin lacks, or that lies past its extension's struct_size, is
// HAL_ERR_NOT_SUPPORTED without a call (has() asks first). Each call
// returns the entry's status unchecked (Plugin::check it); args.struct_size
// is set by the caller. The plugin is borrowed and outlives this.
// Thread-safety: any thread, concurrently on different buffers. Blocks: as
// the entry.
class SIGMA_EXPORT KernelEntries {
 public:
  enum class Entry { grad_scan, shuffle, checksum, moe_permute, moe_unpermute };
  explicit KernelEntries(const Plugin& plugin);
  bool has(Entry entry) const;
  hal_status_t grad_scan(const hal_kernel_grad_scan_args_t& args) const;
  hal_status_t shuffle(const hal_kernel_shuffle_args_t& args) const;
  hal_status_t checksum(const hal_kernel_checksum_args_t& args) const;
  hal_status_t moe_permute(const hal_kernel_moe_permute_args_t& args) const;
  hal_status_t moe_unpermute(const hal_kernel_moe_unpermute_args_t& args) const;

 private:
  const hal_ext_kernels_t* now_ = nullptr;        // minor >= 3
  const hal_ext_kernels_v1_2_t* v1_2_ = nullptr;  // minor 2
};

// The arguments of one collective, struct_size set and the rest zero but
// for what is given. `peer` is the peer of SEND/RECV and the root of
// BROADCAST. Thread-safety: pure.
inline hal_coll_args_t coll_args(hal_coll_op_t op, hal_dtype_t dtype, uint64_t count, const void* sendbuf,
                                 void* recvbuf, hal_reduce_op_t reduce_op = HAL_REDUCE_SUM,
                                 uint32_t peer = 0) {
  hal_coll_args_t a{};
  a.struct_size = sizeof(a);
  a.op = op;
  a.dtype = dtype;
  a.reduce_op = reduce_op;
  a.count = count;
  a.sendbuf = sendbuf;
  a.recvbuf = recvbuf;
  if (op == HAL_COLL_BROADCAST)
    a.root = peer;
  else
    a.peer = peer;
  return a;
}

// Bytes per element of a dtype; 0 for a dtype ABI 1.0 does not define.
SIGMA_EXPORT uint64_t dtype_size(hal_dtype_t dtype) noexcept;
// The value of one element of `dtype` at `element` (dtype_size bytes, any
// alignment) as a double; NaN for a dtype ABI 1.0 does not define. Pure.
SIGMA_EXPORT double element_as_double(const void* element, hal_dtype_t dtype) noexcept;
// "f32", "bf16", ...; "dtype N" for an unknown one.
SIGMA_EXPORT std::string dtype_name(hal_dtype_t dtype);
SIGMA_EXPORT std::string coll_op_name(hal_coll_op_t op);
SIGMA_EXPORT std::string reduce_op_name(hal_reduce_op_t op);

}  // namespace sigma::hal
