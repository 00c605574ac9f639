// The plugin loader: find, dlopen, handshake, validate, init.
#include <sigma/hal_support.h>
#include <sigma/hal.hpp>

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

namespace sigma::hal {
namespace {

namespace fs = std::filesystem;

std::string plugin_file_name(const std::string& name) { return "libsigma_hal_" + name + ".so"; }

// The folder holding the libsigma shared object this code runs in, so that
// the build tree and an install tree both find their own plugins.
std::string libsigma_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&plugin_search_path), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  std::error_code ec;
  fs::path p = fs::canonical(info.dli_fname, ec);
  return ec ? std::string{} : p.parent_path().string();
}

}  // namespace

std::vector<std::string> plugin_search_path() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("SIGMA_HAL_PLUGIN_PATH"); env != nullptr) {
    std::stringstream ss(env);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      if (!dir.empty()) dirs.push_back(dir);
    }
  }
  if (std::string lib = libsigma_dir(); !lib.empty()) dirs.push_back(lib + "/sigma/plugins");
  return dirs;
}

std::string resolve_plugin(const std::string& name_or_path) {
  if (name_or_path.empty()) throw Error(Code::invalid_argument, "empty plugin name");
  const bool is_path =
      name_or_path.find('/') != std::string::npos ||
      (name_or_path.size() > 3 && name_or_path.compare(name_or_path.size() - 3, 3, ".so") == 0);
  if (is_path) return name_or_path;
  std::string searched;
  for (const auto& dir : plugin_search_path()) {
    fs::path candidate = fs::path(dir) / plugin_file_name(name_or_path);
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  throw Error(Code::unavailable, "HAL plugin '" + name_or_path + "' not found: no " +
                                     plugin_file_name(name_or_path) + " in [" + searched +
                                     "] (set SIGMA_HAL_PLUGIN_PATH or pass a path)");
}

std::string validate_api(const hal_api_t* api, const std::string& origin) {
  auto fail = [&](const std::string& what) { return origin + ": " + what; };
  char why[256];
  if (hal_check_api(api, why, sizeof why) != 0) return fail(why);
  // The extension chain: bounded, acyclic, each header plausible. Bits and
  // extensions a later minor defined mean nothing from an earlier plugin
  // (hal.h, version rule 5): HAL_CAP_KERNELS and HAL_EXT_KERNELS are 1.2's.
  const bool knows_kernels = api->abi_minor >= 2;
  std::set<const void*> seen;
  bool has_fault_ext = false, has_kernels_ext = false;
  for (const hal_ext_header_t* e = api->extensions; e != nullptr; e = e->next) {
    if (!seen.insert(e).second) return fail("the extension chain has a cycle");
    if (seen.size() > 64) return fail("the extension chain is longer than 64");
    if (e->struct_size < sizeof(hal_ext_header_t)) {
      return fail("extension of type " + std::to_string(e->type) + " has struct_size " +
                  std::to_string(e->struct_size) + ", smaller than its header");
    }
    if (e->type == HAL_EXT_FAULT_INJECTION) {
      if (e->struct_size < HAL_EXT_FAULT_INJECTION_V1_0_SIZE) {
        return fail("the fault-injection extension is smaller than ABI 1.0's");
      }
      auto* f = reinterpret_cast<const hal_ext_fault_injection_t*>(e);
      if (f->inject == nullptr || f->clear == nullptr) {
        return fail("hal_ext_fault_injection_t.inject/clear is NULL, but both are required");
      }
      has_fault_ext = true;
    }
    if (e->type == HAL_EXT_KERNELS && knows_kernels) {
      // Entries are optional: a short (older) struct has fewer of them.
      if (e->struct_size < offsetof(hal_ext_kernels_t, grad_scan) + sizeof(void*))
        return fail("the kernels extension has struct_size " + std::to_string(e->struct_size) +
                    ", too small for its first entry");
      has_kernels_ext = true;
    }
  }
  if (((api->capabilities & HAL_CAP_FAULT_INJECTION) != 0) != has_fault_ext) {
    return fail("HAL_CAP_FAULT_INJECTION does not match the extension chain");
  }
  if (knows_kernels && ((api->capabilities & HAL_CAP_KERNELS) != 0) != has_kernels_ext) {
    return fail("HAL_CAP_KERNELS does not match the extension chain");
  }
  return {};
}

PluginPtr Plugin::load(const std::string& name_or_path, const LoadOptions& options) {
  const std::string path = resolve_plugin(name_or_path);
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw Error(Code::unavailable,
                "cannot load HAL plugin '" + path + "': " + (why ? why : "unknown dlopen error"));
  }
  // From here the handle is owned by the Plugin, which closes it on any throw.
  PluginPtr p(new Plugin());
  p->handle_ = handle;
  p->path_ = path;
  void* sym = ::dlsym(handle, HAL_GET_API_V1_SYMBOL);
  if (sym == nullptr) {
    throw Error(Code::invalid_argument, "HAL plugin '" + path + "' does not export the symbol " +
                                            HAL_GET_API_V1_SYMBOL + " (is it a HAL plugin?)");
  }
  // The ELF symbol table says what the name is: calling a data object would
  // jump into its bytes.
  Dl_info info{};
  void* found = nullptr;
  const bool known = ::dladdr1(sym, &info, &found, RTLD_DL_SYMENT) != 0 && found != nullptr;
  const auto type = known ? ELF64_ST_TYPE(static_cast<const ElfW(Sym)*>(found)->st_info) : STT_FUNC;
  if (type != STT_FUNC && type != STT_GNU_IFUNC) {
    throw Error(Code::invalid_argument, "HAL plugin '" + path + "' exports " + HAL_GET_API_V1_SYMBOL +
                                            " as a data object, not a function (is it a HAL plugin?)");
  }
  auto* get_api = reinterpret_cast<hal_get_api_v1_fn*>(sym);
  const hal_api_t* api = get_api(HAL_ABI_MAJOR, HAL_ABI_MINOR);
  if (api == nullptr) {
    throw Error(Code::not_supported, "HAL plugin '" + path + "': " + HAL_GET_API_V1_SYMBOL + "(" +
                                         std::to_string(HAL_ABI_MAJOR) + ", " +
                                         std::to_string(HAL_ABI_MINOR) +
                                         ") returned NULL: it cannot serve this host's ABI");
  }
  // A table of another major would need an adapter; ABI 1 is the first, so
  // there is none yet and validate_api names the mismatch.
  if (std::string err = validate_api(api, "HAL plugin '" + path + "'"); !err.empty()) {
    const bool other_major = api->struct_size >= offsetof(hal_api_t, abi_major) + sizeof(api->abi_major) &&
                             api->abi_major != HAL_ABI_MAJOR;
    throw Error(other_major ? Code::not_supported : Code::invalid_argument, err);
  }
  hal_init_args_t args{};
  args.struct_size = sizeof(args);
  args.options = options.options.c_str();
  args.job_dir = options.job_dir.empty() ? nullptr : options.job_dir.c_str();
  hal_status_t st = api->init(&args);
  // api_ is set only after a successful init, so the destructor finalises
  // exactly what was initialised.
  p->api_ = api;
  try {
    p->check(st, "hal_api_t.init");
  } catch (const Error& e) {
    p->api_ = nullptr;
    throw PluginInitError(e.code(), e.what());
  }
  return p;
}

Plugin::~Plugin() {
  if (api_ != nullptr) api_->finalize();
  if (handle_ != nullptr) ::dlclose(handle_);
}

bool Plugin::has_streams() const { return api_->device->stream_create != nullptr; }

const hal_ext_fault_injection_t* Plugin::fault_injection() const {
  for (const hal_ext_header_t* e = api_->extensions; e != nullptr; e = e->next) {
    if (e->type == HAL_EXT_FAULT_INJECTION) return reinterpret_cast<const hal_ext_fault_injection_t*>(e);
  }
  return nullptr;
}

namespace {

// The kernels extension in the chain, for a plugin that declares a minor
// that defines it (hal.h, version rule 5: 1.2 did), or nullptr.
const hal_ext_header_t* kernels_extension(const hal_api_t& api) {
  if (api.abi_minor < 2) return nullptr;
  for (const hal_ext_header_t* e = api.extensions; e != nullptr; e = e->next)
    if (e->type == HAL_EXT_KERNELS) return e;
  return nullptr;
}

}  // namespace

const hal_ext_kernels_t* Plugin::kernels() const {
  if (api_->abi_minor < 3) return nullptr;  // 1.2's entries are positional: kernels_v1_2()
  return reinterpret_cast<const hal_ext_kernels_t*>(kernels_extension(*api_));
}

const hal_ext_kernels_v1_2_t* Plugin::kernels_v1_2() const {
  if (api_->abi_minor != 2) return nullptr;
  return reinterpret_cast<const hal_ext_kernels_v1_2_t*>(kernels_extension(*api_));
}

bool Plugin::host_addressable(uint32_t device) const {
  if ((api_->capabilities & HAL_CAP_HOST_MEMORY) != 0) return true;
  {
    std::lock_guard lk(addressable_mu_);
    if (device < addressable_.size() && addressable_[device] >= 0) return addressable_[device] != 0;
  }
  hal_device_props_t p{};
  p.struct_size = sizeof p;
  check(api_->device->get_props(device, &p), "get_props");
  const bool yes = p.memory_kind != HAL_MEMORY_DEVICE;
  constexpr uint32_t kRemembered = 4096;  // devices per process, far above any node's
  if (device >= kRemembered) return yes;
  std::lock_guard lk(addressable_mu_);
  if (device >= addressable_.size()) addressable_.resize(device + 1, -1);
  addressable_[device] = yes ? 1 : 0;
  return yes;
}

hal_status_t Plugin::check(hal_status_t status, const char* entry, bool allow_in_progress) const {
  const std::string who = "HAL plugin '" + (api_ ? std::string(api_->name) : path_) + "': " + entry;
  if (status == HAL_OK || (status == HAL_IN_PROGRESS && allow_in_progress)) return status;
  if (status > 0 || status < HAL_ERR_MIN_V1) {
    throw Error(Code::internal, who + " returned " + hal_status_name(status) +
                                    ", which ABI 1.0 does not define for this entry (plugin bug)");
  }
  throw Error(from_hal_status(status), who + " failed with " + hal_status_name(status) + last_message());
}

std::string Plugin::last_message() const {
  // A plugin's message is untrusted: NULL is named, the length bounded.
  constexpr size_t kMax = 4096;
  const char* msg = api_ ? api_->get_last_error() : nullptr;
  if (api_ != nullptr && msg == nullptr) return " (get_last_error returned NULL: plugin bug)";
  if (msg == nullptr || *msg == '\0') return {};
  const size_t n = ::strnlen(msg, kMax + 1);
  std::string out = ": " + std::string(msg, std::min(n, kMax));
  if (n > kMax) out += "... (message cut at " + std::to_string(kMax) + " bytes)";
  return out;
}

uint32_t Plugin::device_count() const {
  uint32_t n = 0;
  check(api_->device->get_count(&n), "hal_device_api_t.get_count");
  return n;
}

hal_device_props_t Plugin::device_props(uint32_t device) const {
  hal_device_props_t props{};
  props.struct_size = sizeof(props);
  check(api_->device->get_props(device, &props), "hal_device_api_t.get_props");
  return props;
}

namespace {

// Guard entries past the capacity a plugin is given, checked after the
// call: a plugin that writes past what it was given is caught before its
// output is used, and the host's heap is not what it overwrote.
constexpr uint32_t kGuard = 4;
constexpr unsigned char kGuardByte = 0xA5;

template <class T>
void arm_guard(std::vector<T>& v, size_t n) {
  std::memset(static_cast<void*>(v.data() + n), kGuardByte, (v.size() - n) * sizeof(T));
}

// How many of the entries past the first n were written into.
template <class T>
size_t guard_hits(const std::vector<T>& v, size_t n) {
  size_t hits = 0;
  for (size_t i = n; i < v.size(); ++i) {
    const auto* b = reinterpret_cast<const unsigned char*>(&v[i]);
    hits += std::any_of(b, b + sizeof(T), [](unsigned char c) { return c != kGuardByte; }) ? 1 : 0;
  }
  return hits;
}

}  // namespace

std::vector<hal_field_info_t> Plugin::telemetry_fields(uint32_t device) const {
  const std::string who = "HAL plugin '" + std::string(api_->name) + "': hal_telemetry_api_t.list_fields";
  uint32_t n = 0;
  check(api_->telemetry->list_fields(device, nullptr, 0, &n), "hal_telemetry_api_t.list_fields");
  if (n > HAL_MAX_TELEMETRY_FIELDS)
    throw Error(Code::internal, who + " says " + std::to_string(n) + " fields, more than the " +
                                    std::to_string(HAL_MAX_TELEMETRY_FIELDS) +
                                    " a device may list (plugin bug)");
  std::vector<hal_field_info_t> fields(n + kGuard);
  arm_guard(fields, n);
  uint32_t got = 0;
  check(api_->telemetry->list_fields(device, fields.data(), n, &got), "hal_telemetry_api_t.list_fields");
  if (guard_hits(fields, n) > 0)
    throw Error(Code::internal, who + " wrote past the capacity of " + std::to_string(n) +
                                    " entries it was given (plugin bug)");
  fields.resize(std::min(n, got));
  return fields;
}

std::vector<hal_telemetry_sample_t> Plugin::read_telemetry(uint32_t device,
                                                           const std::vector<hal_field_id_t>& ids) const {
  std::vector<hal_telemetry_sample_t> samples(ids.size() + kGuard);
  arm_guard(samples, ids.size());
  check(api_->telemetry->read(device, ids.data(), static_cast<uint32_t>(ids.size()), samples.data()),
        "hal_telemetry_api_t.read");
  if (const size_t hits = guard_hits(samples, ids.size()); hits > 0)
    throw Error(Code::internal, "HAL plugin '" + std::string(api_->name) +
                                    "': hal_telemetry_api_t.read wrote " + std::to_string(hits) +
                                    (hits == kGuard ? " or more" : "") + " sample(s) past the " +
                                    std::to_string(ids.size()) + " it was given room for (plugin bug)");
  samples.resize(ids.size());
  return samples;
}

hal_self_test_result_t Plugin::self_test(uint32_t device, uint64_t budget_bytes) const {
  hal_self_test_result_t r{};
  r.struct_size = sizeof(r);
  check(api_->device->self_test(device, budget_bytes, &r), "hal_device_api_t.self_test");
  r.message[sizeof(r.message) - 1] = '\0';
  return r;
}

}  // namespace sigma::hal
