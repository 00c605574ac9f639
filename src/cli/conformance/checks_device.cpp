// Device, memory, self-test, telemetry, fault injection and lifecycle checks.
#include "suite.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

namespace sigma::conformance {
namespace {

bool terminated(const char* s, size_t n) { return std::memchr(s, '\0', n) != nullptr; }

bool defined_status(hal_status_t s) { return s == HAL_OK || (s < 0 && s >= HAL_ERR_MIN_V1); }

void need_device(Context& ctx) {
  if (!ctx.has_device()) throw Skip{"no device"};
}

uint64_t as_u64(const hal_telemetry_sample_t& s) {
  switch (s.type) {
    case HAL_VALUE_U64:
      return s.value.u64;
    case HAL_VALUE_I64:
      return static_cast<uint64_t>(s.value.i64);
    default:
      return 0;
  }
}

bool not_less(const hal_telemetry_sample_t& later, const hal_telemetry_sample_t& earlier) {
  if (later.type == HAL_VALUE_F64) return later.value.f64 >= earlier.value.f64;
  if (later.type == HAL_VALUE_I64) return later.value.i64 >= earlier.value.i64;
  return as_u64(later) >= as_u64(earlier);
}

}  // namespace

void run_device_checks(Context& ctx) {
  auto& plugin = *ctx.plugin();
  const hal_device_api_t& d = plugin.device_api();

  ctx.run("device.props", [&] {
    need_device(ctx);
    for (uint32_t i = 0; i < ctx.device_count(); ++i) {
      hal_device_props_t p = plugin.device_props(i);
      const std::string at = "device " + std::to_string(i) + ": ";
      expect(terminated(p.name, sizeof(p.name)) && p.name[0] != '\0', at + "name empty or unterminated");
      expect(terminated(p.uuid, sizeof(p.uuid)), at + "uuid unterminated");
      expect(p.memory_kind == HAL_MEMORY_HOST || p.memory_kind == HAL_MEMORY_DEVICE,
             at + "unknown memory_kind " + std::to_string(p.memory_kind));
      expect((plugin.api().capabilities & HAL_CAP_HOST_MEMORY) == 0 || p.memory_kind == HAL_MEMORY_HOST,
             at + "HAL_CAP_HOST_MEMORY is set but memory_kind is DEVICE");
      expect(p.memory_bytes > 0, at + "memory_bytes is 0");
      expect(p.alignment_bytes > 0 && (p.alignment_bytes & (p.alignment_bytes - 1)) == 0,
             at + "alignment_bytes " + std::to_string(p.alignment_bytes) + " is not a power of two");
      for (double f : p.peak_flops) expect(f >= 0, at + "negative peak_flops");
    }
  });

  ctx.run("device.memory", [&] {
    need_device(ctx);
    auto pp = ctx.plugin();
    hal_device_props_t props = plugin.device_props(0);
    {
      hal::Buffer zero(pp, 0, 0);
      expect(zero.data() != nullptr, "mem_alloc(size 0) returned NULL (must be a unique pointer)");
      hal::Buffer zero2(pp, 0, 0);
      expect(zero.data() != zero2.data(), "two size-0 allocations share a pointer");
    }
    const uint64_t n = (1u << 20) + 13;
    hal::Buffer a(pp, 0, n), b(pp, 0, n);
    expect(reinterpret_cast<uintptr_t>(a.data()) % props.alignment_bytes == 0,
           "allocation not aligned to alignment_bytes");
    std::vector<uint8_t> src(n), back(n, 0);
    for (uint64_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
    a.copy_from_host(src.data(), n);
    plugin.check(d.memcpy(0, b.data(), a.data(), n, HAL_COPY_DEVICE_TO_DEVICE, nullptr),
                 "hal_device_api_t.memcpy(D2D)");
    b.copy_to_host(back.data(), n);
    expect(back == src, "host -> device -> device -> host round trip changed the bytes");
    void* p = nullptr;
    plugin.check(d.mem_alloc(0, 100, 4096, &p), "hal_device_api_t.mem_alloc(alignment 4096)");
    const bool aligned = reinterpret_cast<uintptr_t>(p) % 4096 == 0;
    plugin.check(d.mem_free(0, p), "hal_device_api_t.mem_free");
    expect(aligned, "mem_alloc ignored alignment 4096");
    expect_status(d.mem_free(0, nullptr), HAL_OK, "mem_free(NULL)");
  });

  ctx.run("device.streams", [&] {
    need_device(ctx);
    if (!plugin.has_streams()) throw Skip{"the plugin has no streams (OPTIONAL)"};
    hal_stream_t s = nullptr;
    plugin.check(d.stream_create(0, &s), "hal_device_api_t.stream_create");
    hal::Buffer a(ctx.plugin(), 0, 4096);
    std::vector<uint8_t> src(4096, 0x5A), back(4096, 0);
    plugin.check(d.memcpy(0, a.data(), src.data(), 4096, HAL_COPY_HOST_TO_DEVICE, s), "memcpy(stream)");
    plugin.check(d.memcpy(0, back.data(), a.data(), 4096, HAL_COPY_DEVICE_TO_HOST, s), "memcpy(stream)");
    plugin.check(d.stream_synchronize(s), "hal_device_api_t.stream_synchronize");
    plugin.check(d.stream_destroy(s), "hal_device_api_t.stream_destroy");
    expect(back == src, "stream-ordered copies gave wrong bytes");
  });

  ctx.run("device.self_test", [&] {
    need_device(ctx);
    for (uint32_t i = 0; i < ctx.device_count(); ++i) {
      hal_self_test_result_t r = plugin.self_test(i, 0);
      expect(r.passed == 1, "device " + std::to_string(i) + " failed its self-test: " + r.message);
      expect(r.memory_bytes_tested > 0, "self-test tested no memory");
      expect(r.gemm_max_rel_error >= 0, "self-test ran no GEMM");
    }
  });
}

void run_telemetry_checks(Context& ctx) {
  auto& plugin = *ctx.plugin();
  const hal_telemetry_api_t& t = plugin.telemetry_api();
  std::vector<hal_field_info_t> fields;

  ctx.run("telemetry.list", [&] {
    need_device(ctx);
    fields = plugin.telemetry_fields(0);
    expect(!fields.empty(), "no telemetry fields listed");
    // Two-call pattern with a short array: no write past capacity.
    std::vector<hal_field_info_t> one(2);
    std::memset(&one[1], 0xCD, sizeof(hal_field_info_t));
    uint32_t n = 0;
    plugin.check(t.list_fields(0, one.data(), 1, &n), "list_fields(capacity 1)");
    expect(n == fields.size(), "list_fields count changed between calls");
    const auto* tail = reinterpret_cast<const unsigned char*>(&one[1]);
    for (size_t i = 0; i < sizeof(hal_field_info_t); ++i)
      expect(tail[i] == 0xCD, "list_fields wrote past capacity");
    std::map<hal_field_id_t, int> seen;
    for (const auto& f : fields) {
      expect(++seen[f.id] == 1, "field id " + std::to_string(f.id) + " listed twice");
      expect(terminated(f.name, sizeof(f.name)) && f.name[0] != '\0', "a field has no name");
      expect(terminated(f.unit, sizeof(f.unit)), "a field's unit is unterminated");
      expect(f.type <= HAL_VALUE_U64, std::string("field ") + f.name + " has an unknown type");
      expect(f.id >= HAL_FIELD_VENDOR_FIRST || (f.id >= 1 && f.id < HAL_FIELD_STANDARD_COUNT_V1),
             std::string("field ") + f.name + " uses id " + std::to_string(f.id) +
                 ", neither standard nor vendor (>= 0x80000000)");
    }
  });

  ctx.run("telemetry.read", [&] {
    need_device(ctx);
    if (fields.empty()) throw Skip{"no fields"};
    std::vector<hal_field_id_t> ids;
    for (const auto& f : fields) ids.push_back(f.id);
    ids.push_back(0x7FFFFFF0u);  // an id nobody defines
    auto samples = plugin.read_telemetry(0, ids);
    for (size_t i = 0; i < fields.size(); ++i) {
      const auto& s = samples[i];
      const std::string at = std::string("field ") + fields[i].name + ": ";
      expect(s.id == fields[i].id, at + "sample id does not match the request");
      expect(defined_status(s.status), at + "undefined per-field status " + std::to_string(s.status));
      if (s.status == HAL_OK) {
        expect(s.type == fields[i].type, at + "sample type differs from the listed type");
        expect(s.timestamp_ns > 0, at + "OK sample without a timestamp");
        if (s.type == HAL_VALUE_F64) {
          // hal.h: never an invented number; a field with no reading says so.
          const double v = s.value.f64;
          expect(std::isfinite(v), at + "reads " + std::to_string(v) +
                                       " with HAL_OK (a field without a reading returns a per-field error)");
          if (s.id == HAL_FIELD_UTILIZATION_PCT)
            expect(v >= 0 && v <= 100, at + "utilization " + std::to_string(v) + " is outside 0..100");
          if (s.id == HAL_FIELD_POWER_W || s.id == HAL_FIELD_ENERGY_J ||
              s.id == HAL_FIELD_CLOCK_COMPUTE_MHZ || s.id == HAL_FIELD_CLOCK_MEMORY_MHZ)
            expect(v >= 0,
                   at + "reads " + std::to_string(v) + ", a negative value for a quantity that cannot be");
          if (s.id == HAL_FIELD_TEMPERATURE_C)
            expect(v > -273.15 && v < 1000,
                   at + "temperature " + std::to_string(v) + " C is not a physical one");
        }
      }
    }
    expect(samples.back().status == HAL_ERR_NOT_SUPPORTED, "an unknown field id read as " +
                                                               hal_status_name(samples.back().status) +
                                                               " (expected per-field NOT_SUPPORTED)");
  });

  ctx.run("telemetry.monotonic_concurrent", [&] {
    need_device(ctx);
    std::vector<hal_field_id_t> mono;
    for (const auto& f : fields)
      if (f.flags & HAL_FIELD_FLAG_MONOTONIC) mono.push_back(f.id);
    std::vector<hal_field_id_t> ids;
    for (const auto& f : fields) ids.push_back(f.id);
    if (ids.empty()) throw Skip{"no fields"};
    std::atomic<int> bad{0};
    std::string why;
    std::mutex mu;
    std::vector<std::thread> threads;
    for (int th = 0; th < 4; ++th) {
      threads.emplace_back([&] {
        std::vector<hal_telemetry_sample_t> prev(ids.size()), cur(ids.size());
        for (int it = 0; it < 100; ++it) {
          try {  // the wrapper's read: guard entries catch a write past the array
            cur = plugin.read_telemetry(0, ids);
          } catch (const Error& e) {
            std::lock_guard lk(mu);
            why = std::string("concurrent read: ") + e.what();
            ++bad;
            return;
          }
          for (size_t i = 0; it > 0 && i < ids.size(); ++i) {
            const bool is_mono = std::find(mono.begin(), mono.end(), ids[i]) != mono.end();
            if (is_mono && cur[i].status == HAL_OK && prev[i].status == HAL_OK &&
                !not_less(cur[i], prev[i])) {
              std::lock_guard lk(mu);
              why = std::string("monotonic field ") + fields[i].name + " went backwards";
              ++bad;
            }
          }
          prev.swap(cur);
        }
      });
    }
    // Keep the device busy meanwhile so counters move.
    for (int i = 0; i < 50; ++i) hal::Buffer b(ctx.plugin(), 0, 4096);
    for (auto& th : threads) th.join();
    expect(bad == 0, why);
  });
}

void run_fault_checks(Context& ctx) {
  auto& plugin = *ctx.plugin();
  const hal_ext_fault_injection_t* fi = plugin.fault_injection();

  ctx.run("fault.unsupported_kinds", [&] {
    if (fi == nullptr) throw Skip{"no fault-injection extension (OPTIONAL)"};
    need_device(ctx);
    for (uint32_t k = 0; k < HAL_FAULT_KIND_COUNT_V1 + 1; ++k) {
      if (fi->supported_kinds & (uint64_t{1} << k)) continue;
      hal_fault_spec_t spec{};
      spec.struct_size = sizeof(spec);
      spec.kind = k;
      expect_status(fi->inject(&spec), HAL_ERR_NOT_SUPPORTED,
                    "inject(kind " + std::to_string(k) + ", not in supported_kinds)");
    }
  });

  ctx.run("fault.device_lost", [&] {
    if (fi == nullptr || !(fi->supported_kinds & (1u << HAL_FAULT_DEVICE_LOST))) {
      throw Skip{"the plugin does not inject DEVICE_LOST"};
    }
    need_device(ctx);
    hal_fault_spec_t spec{};
    spec.struct_size = sizeof(spec);
    spec.kind = HAL_FAULT_DEVICE_LOST;
    plugin.check(fi->inject(&spec), "fault inject(DEVICE_LOST)");
    hal_device_props_t props{};
    props.struct_size = sizeof(props);
    hal_status_t st = plugin.device_api().get_props(0, &props);
    void* p = nullptr;
    hal_status_t st_alloc = plugin.device_api().mem_alloc(0, 64, 0, &p);
    hal_telemetry_sample_t s{};
    hal_status_t st_read = HAL_OK;
    try {  // the wrapper's read: guard entries catch a write past the array
      s = plugin.read_telemetry(0, {HAL_FIELD_MEMORY_USED_BYTES}).at(0);
    } catch (const Error& e) {
      st_read = to_hal_status(e.code());
    }
    plugin.check(fi->clear(0), "fault clear");
    expect_status(st, HAL_ERR_DEVICE_LOST, "get_props on a lost device");
    expect_status(st_alloc, HAL_ERR_DEVICE_LOST, "mem_alloc on a lost device");
    expect_status(st_read, HAL_OK, "telemetry read (the call) on a lost device");
    expect_status(s.status, HAL_ERR_DEVICE_LOST, "telemetry sample status on a lost device");
    plugin.device_props(0);  // usable again after clear
  });
}

void run_lifecycle_checks(Context& ctx) {
  // The suite's own plugin reference is gone: these load it by themselves.
  hal::LoadOptions lo;
  lo.options = ctx.opts().plugin_options;
  ctx.run("lifecycle.double_init", [&] {
    auto p1 = hal::Plugin::load(ctx.opts().plugin, lo);
    auto p2 = hal::Plugin::load(ctx.opts().plugin, lo);
    p1.reset();
    expect(p2->device_count() == ctx.device_count(),
           "the plugin stopped working when one of two references finalised");
  });

  ctx.run("lifecycle.reload", [&] {
    for (int round = 0; round < 3; ++round) {
      auto p = hal::Plugin::load(ctx.opts().plugin, lo);
      expect(p->device_count() == ctx.device_count(), "device count changed after a reload");
      if (ctx.has_device()) hal::Buffer b(p, 0, 1024);
    }
  });

  ctx.run("lifecycle.finalize_extra", [&] {
    auto p = hal::Plugin::load(ctx.opts().plugin, lo);
    const hal_api_t& api = p->api();
    // One finalize too many must be refused, not crash; the loader still owns
    // one reference, so give it back by init again.
    expect_status(api.finalize(), HAL_OK, "finalize (the loader's reference)");
    expect_status(api.finalize(), HAL_ERR_INVALID_ARGUMENT, "finalize without init");
    hal_init_args_t args{};
    args.struct_size = sizeof(args);
    args.options = ctx.opts().plugin_options.c_str();
    expect_status(api.init(&args), HAL_OK, "init after finalize");
  });

  ctx.run("lifecycle.finalize_in_flight", [&] {
    if (!ctx.has_device()) throw Skip{"no device"};
    auto p = hal::Plugin::load(ctx.opts().plugin, lo);
    const hal_ext_fault_injection_t* fi = p->fault_injection();
    const bool can_hang_alone = fi && (fi->supported_kinds & (1u << HAL_FAULT_HANG));
    if (ctx.world() == 1 && !can_hang_alone) {
      throw Skip{"needs 2 ranks (a peer that never joins) or the HANG fault"};
    }
    if (!ctx.comm_ok) throw Skip{ctx.comm_skip_reason};
    const hal_api_t& api = p->api();
    ctx.plugin() = p;
    auto bs = ctx.next_bootstrap();
    hal_comm_create_args_t ca{};
    ca.struct_size = sizeof(ca);
    ca.rank = ctx.rank();
    ca.world_size = ctx.world();
    ca.bootstrap = bs->table();
    ca.timeout_ns = 60'000'000'000ull;
    hal_comm_t comm = nullptr;
    p->check(api.coll->comm_create(&ca, &comm), "comm_create");
    std::vector<float> buf(1024, 1.0f);
    hal_request_t req = nullptr;
    void* dev = nullptr;
    p->check(api.device->mem_alloc(0, buf.size() * 4, 0, &dev), "mem_alloc");
    if (ctx.world() == 1) {
      hal_fault_spec_t spec{};
      spec.struct_size = sizeof(spec);
      spec.kind = HAL_FAULT_HANG;
      p->check(fi->inject(&spec), "inject(HANG)");
    }
    // Rank 0 posts an all-reduce that its peers never join (or that hangs).
    if (ctx.rank() == 0) {
      hal_coll_args_t a{};
      a.struct_size = sizeof(a);
      a.op = HAL_COLL_ALL_REDUCE;
      a.dtype = HAL_DTYPE_F32;
      a.count = buf.size();
      a.sendbuf = dev;
      a.recvbuf = dev;
      p->check(api.coll->post(comm, &a, nullptr, &req), "post");
      expect_status(api.coll->wait(req, 50'000'000), HAL_ERR_TIMEOUT, "wait on the unjoined op");
    }
    ctx.store_barrier("finalize_in_flight_posted");
    // Drop the suite's and our reference: the last finalize must clean up the
    // communicator, the request and the memory we left, and not hang.
    ctx.plugin().reset();
    const auto t0 = std::chrono::steady_clock::now();
    p.reset();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    expect(s < 10.0, "finalize with a request in flight took " + std::to_string(s) + " s");
    ctx.store_barrier("finalize_in_flight_done");
    auto again = hal::Plugin::load(ctx.opts().plugin, lo);
    expect(again->device_count() == ctx.device_count(), "the plugin did not come back after finalize");
  });
}

}  // namespace sigma::conformance
