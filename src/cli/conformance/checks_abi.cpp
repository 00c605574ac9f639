// ABI handshake, table and argument sizes, NULL arguments, the error contract.
#include "suite.hpp"

#include <dlfcn.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace sigma::conformance {
namespace {

// A struct of type T followed by `extra` bytes, as a newer host would pass.
template <typename T>
struct Padded {
  T value{};
  unsigned char tail[64];
  Padded() {
    std::memset(tail, 0, sizeof(tail));
    value.struct_size = sizeof(T) + sizeof(tail);
  }
};

void expect_message(const hal_api_t& api, const std::string& call) {
  const char* m = api.get_last_error();
  expect(m != nullptr, "get_last_error() returned NULL after " + call + " failed");
  expect(m[0] != '\0', "get_last_error() is empty after " + call + " failed");
}

}  // namespace

void run_abi_checks(Context& ctx) {
  const hal_api_t& api = ctx.plugin()->api();

  ctx.run("abi.handshake", [&] {
    // A second dlopen of the same file shares the loaded object.
    void* h = ::dlopen(ctx.plugin()->path().c_str(), RTLD_NOW | RTLD_LOCAL);
    expect(h != nullptr, "dlopen failed");
    auto* get = reinterpret_cast<hal_get_api_v1_fn*>(::dlsym(h, HAL_GET_API_V1_SYMBOL));
    std::string err;
    if (get == nullptr) {
      err = "symbol hal_get_api_v1 missing";
    } else {
      const hal_api_t* same = get(HAL_ABI_MAJOR, HAL_ABI_MINOR);
      const hal_api_t* newer_minor = get(HAL_ABI_MAJOR, HAL_ABI_MINOR + 7);
      const hal_api_t* other_major = get(HAL_ABI_MAJOR + 1, 0);
      const hal_api_t* zero_major = get(0, 0);
      if (same != &api)
        err = "hal_get_api_v1 returned a different table on a second call";
      else if (newer_minor == nullptr || newer_minor->abi_major != HAL_ABI_MAJOR)
        err = "hal_get_api_v1(1, newer minor) must return the major-1 table";
      else if (other_major != nullptr)
        err = "hal_get_api_v1(2, 0) must return NULL";
      else if (zero_major != nullptr)
        err = "hal_get_api_v1(0, 0) must return NULL";
    }
    ::dlclose(h);
    expect(err.empty(), err);
    expect(api.abi_minor <= 1000, "abi_minor " + std::to_string(api.abi_minor) + " is implausible");
  });

  ctx.run("abi.tables", [&] {
    std::string err = hal::validate_api(&api, "plugin");
    expect(err.empty(), err);
    expect(api.version[0] != '\0', "hal_api_t.version is empty");
  });

  ctx.run("abi.init_args_size", [&] {
    hal_init_args_t small{};
    small.struct_size = HAL_INIT_ARGS_V1_0_SIZE - 8;
    expect_status(api.init(&small), HAL_ERR_INVALID_ARGUMENT, "init(struct_size smaller than 1.0)");
    expect_message(api, "init");
    expect_status(api.init(nullptr), HAL_ERR_INVALID_ARGUMENT, "init(NULL)");
    Padded<hal_init_args_t> big;
    expect_status(api.init(&big.value), HAL_OK, "init(struct_size larger than 1.0)");
    expect_status(api.finalize(), HAL_OK, "finalize after the extra init");
  });

  ctx.run("abi.props_size", [&] {
    if (!ctx.has_device()) {
      uint32_t n = 0;
      if (api.device->get_count(&n) != HAL_OK || n == 0) throw Skip{"no device"};
    }
    hal_device_props_t small{};
    small.struct_size = HAL_DEVICE_PROPS_V1_0_SIZE - 8;
    expect_status(api.device->get_props(0, &small), HAL_ERR_INVALID_ARGUMENT,
                  "get_props(struct_size smaller than 1.0)");
    Padded<hal_device_props_t> big;
    std::memset(big.tail, 0xAB, sizeof(big.tail));
    expect_status(api.device->get_props(0, &big.value), HAL_OK, "get_props(larger struct_size)");
    expect(big.value.struct_size == sizeof(hal_device_props_t) + sizeof(big.tail),
           "get_props changed struct_size");
    for (unsigned char c : big.tail) expect(c == 0xAB, "get_props wrote past the 1.0 struct it knows");
  });

  ctx.run("abi.null_arguments", [&] {
    expect_status(api.device->get_count(nullptr), HAL_ERR_INVALID_ARGUMENT, "get_count(NULL)");
    expect_message(api, "get_count(NULL)");
    expect_status(api.device->get_props(0, nullptr), HAL_ERR_INVALID_ARGUMENT, "get_props(0, NULL)");
    expect_status(api.device->mem_alloc(0, 16, 0, nullptr), HAL_ERR_INVALID_ARGUMENT, "mem_alloc(out NULL)");
    expect_status(api.device->self_test(0, 0, nullptr), HAL_ERR_INVALID_ARGUMENT, "self_test(result NULL)");
    expect_status(api.telemetry->list_fields(0, nullptr, 0, nullptr), HAL_ERR_INVALID_ARGUMENT,
                  "list_fields(count NULL)");
    expect_status(api.telemetry->read(0, nullptr, 1, nullptr), HAL_ERR_INVALID_ARGUMENT,
                  "read(ids NULL, n 1)");
    hal_comm_t comm = nullptr;
    expect_status(api.coll->comm_create(nullptr, &comm), HAL_ERR_INVALID_ARGUMENT, "comm_create(args NULL)");
    expect_status(api.coll->test(nullptr), HAL_ERR_INVALID_ARGUMENT, "test(NULL)");
    expect_status(api.coll->wait(nullptr, 0), HAL_ERR_INVALID_ARGUMENT, "wait(NULL)");
    expect_status(api.coll->request_free(nullptr), HAL_ERR_INVALID_ARGUMENT, "request_free(NULL)");
    expect_message(api, "request_free(NULL)");
  });
}

void run_error_checks(Context& ctx) {
  const hal_api_t& api = ctx.plugin()->api();
  uint32_t count = 0;
  ctx.run("errors.device_count", [&] {
    expect_status(api.device->get_count(&count), HAL_OK, "get_count");
    ctx.set_device_count(count);
    if (count == 0) throw Skip{"no device: the plugin reports 0 devices"};
  });

  ctx.run("errors.invalid_device", [&] {
    hal_device_props_t props{};
    props.struct_size = sizeof(props);
    expect_status(api.device->get_props(count, &props), HAL_ERR_INVALID_ARGUMENT,
                  "get_props(device == count)");
    expect_message(api, "get_props(device == count)");
    void* p = nullptr;
    expect_status(api.device->mem_alloc(count + 3, 16, 0, &p), HAL_ERR_INVALID_ARGUMENT,
                  "mem_alloc(device out of range)");
    hal_field_id_t id = HAL_FIELD_TEMPERATURE_C;
    hal_telemetry_sample_t s{};
    expect_status(api.telemetry->read(count + 1, &id, 1, &s), HAL_ERR_INVALID_ARGUMENT,
                  "telemetry read(device out of range)");
  });

  ctx.run("errors.bad_values", [&] {
    if (!ctx.has_device()) throw Skip{"no device"};
    void* p = nullptr;
    expect_status(api.device->mem_alloc(0, 64, 3, &p), HAL_ERR_INVALID_ARGUMENT, "mem_alloc(alignment 3)");
    char a[8] = {0}, b[8] = {0};
    expect_status(api.device->memcpy(0, a, b, 8, 99, nullptr), HAL_ERR_INVALID_ARGUMENT, "memcpy(kind 99)");
    int not_ours = 0;
    hal_status_t st = api.device->mem_free(0, &not_ours);
    expect(st == HAL_ERR_INVALID_ARGUMENT || st == HAL_OK,
           "mem_free(foreign pointer) returned " + hal_status_name(st) +
               " (INVALID_ARGUMENT, or OK when the plugin cannot tell)");
  });

  ctx.run("errors.last_error_per_thread", [&] {
    // Thread A fails and reads its message; thread B then fails differently;
    // A's message must still be A's.
    std::mutex mu;
    std::condition_variable cv;
    int phase = 0;
    std::string a_first, a_again, b_msg;
    std::thread ta([&] {
      hal_device_props_t props{};
      props.struct_size = sizeof(props);
      api.device->get_props(count + 11, &props);
      a_first = message_of(api.get_last_error());
      {
        std::unique_lock lk(mu);
        phase = 1;
        cv.notify_all();
        cv.wait(lk, [&] { return phase == 2; });
      }
      a_again = message_of(api.get_last_error());
    });
    std::thread tb([&] {
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return phase == 1; });
      }
      api.device->get_count(nullptr);
      b_msg = message_of(api.get_last_error());
      std::lock_guard lk(mu);
      phase = 2;
      cv.notify_all();
    });
    ta.join();
    tb.join();
    expect(!a_first.empty() && !b_msg.empty(), "a failing call left an empty message");
    expect(a_first == a_again, "thread A's message changed after thread B failed: '" + a_first +
                                   "' became '" + a_again + "' (messages must be per thread)");
  });
}

}  // namespace sigma::conformance
