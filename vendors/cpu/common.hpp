// Shared pieces of the cpu vendor: the per-thread error message, and the
// plugin's global state. This plugin includes only sigma/hal.h from libsigma.
#pragma once

#include <sigma/hal.h>

#include <cstdint>
#include <string>

namespace cpu_vendor {

// Records `message` as the calling thread's last error and returns `status`.
hal_status_t fail(hal_status_t status, std::string message);
// The calling thread's last error ("" if none).
const char* last_error();

uint64_t now_ns();

// Options parsed from hal_init_args_t.options ("key=value;key=value").
struct Options {
  std::string host = "127.0.0.1";     // address this process listens on for peers
  std::string iface;                  // or: a network interface to listen on
  uint64_t op_timeout_ms = 600000;    // a collective that takes longer fails
  bool force_callback_store = false;  // use the host's callbacks even for file:// and redis://
  std::string telemetry_root;         // read /sys and /proc below this folder (tests)
};

// Parses the options string; on a malformed one returns false and sets why.
bool parse_options(const char* text, Options& out, std::string& why);

// Whether init has been called (and not finalised to zero).
bool initialised();
const Options& options();

// Checks that `device` is 0 (one device per process) and the plugin is up.
hal_status_t check_device(uint32_t device);

}  // namespace cpu_vendor

namespace cpu_vendor {
// hal_device_self_test_fn of this vendor (self_test.cpp).
hal_status_t self_test(uint32_t device, uint64_t budget_bytes, hal_self_test_result_t* result);
}  // namespace cpu_vendor
