// libFuzzer target for the plugin loader: every input is a root table
// (tests/fuzz/loader/table_plugin.c builds it from the bytes: majors,
// minors, struct sizes, NULL entries, undefined statuses, huge counts,
// listings past their capacity, NaN readings, NULL or long messages). The
// loader must load it or refuse it with a sigma::Error, and the wrapper's
// device and telemetry calls over a loaded one must answer or throw, never
// crash, read past a buffer or allocate without bound.
#include <sigma/error.hpp>
#include <sigma/hal.hpp>

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" __attribute__((weak)) void sigma_fuzz_accepted(const char*) {}

namespace {

using SetTable = void (*)(const uint8_t*, size_t);

SetTable setter() {
  // Held open for the whole run, so the table survives the loader's dlclose.
  static SetTable fn = [] {
    void* h = ::dlopen(SIGMA_FUZZ_TABLE_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) __builtin_trap();
    return reinterpret_cast<SetTable>(::dlsym(h, "sigma_fuzz_set_table"));
  }();
  return fn;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  setter()(data, size);
  sigma::hal::PluginPtr p;
  try {
    p = sigma::hal::Plugin::load(SIGMA_FUZZ_TABLE_PLUGIN);
    sigma_fuzz_accepted("loader");
  } catch (const sigma::Error&) {
    return 0;  // refused, with a reason: fine
  }
  try {
    if (p->device_count() > 0) {
      (void)p->device_props(0);
      std::vector<hal_field_id_t> ids;
      for (const auto& f : p->telemetry_fields(0)) ids.push_back(f.id);
      (void)p->read_telemetry(0, ids);
      (void)p->last_message();
    }
  } catch (const sigma::Error&) {
  }
  return 0;
}
