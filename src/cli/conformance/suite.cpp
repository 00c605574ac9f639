#include "suite.hpp"

#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace sigma::conformance {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::pass:
      return "pass";
    case Outcome::fail:
      return "FAIL";
    case Outcome::skip:
      return "skip";
  }
  return "?";
}

Context::Context(Options opts) : opts_(std::move(opts)) { store_ = bootstrap::open_store(opts_.store_uri); }

void Context::stream(const std::string& line) {
  if (opts_.stream_fd < 0) return;
  const std::string out = line + "\n";
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = ::write(opts_.stream_fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the supervisor is gone: nobody to tell
    done += static_cast<size_t>(n);
  }
}

void Context::record(const std::string& name, Outcome outcome, std::string detail) {
  results_.push_back(Result{name, outcome, std::move(detail), 0});
  stream(nlohmann::json{{"result", results_to_json({results_.back()}).at(0)}}.dump());
}

void Context::run(const std::string& name, const std::function<void()>& body) {
  stream(nlohmann::json{{"begin", name}}.dump());
  Result r{name, Outcome::pass, "", 0};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    body();
  } catch (const Skip& s) {
    r.outcome = Outcome::skip;
    r.detail = s.reason;
  } catch (const Failure& f) {
    r.outcome = Outcome::fail;
    r.detail = f.message;
  } catch (const Error& e) {
    r.outcome = Outcome::fail;
    r.detail = std::string("error (") + std::string(code_name(e.code())) + "): " + e.what();
  } catch (const std::exception& e) {
    r.outcome = Outcome::fail;
    r.detail = std::string("exception: ") + e.what();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  results_.push_back(std::move(r));
  stream(nlohmann::json{{"result", results_to_json({results_.back()}).at(0)}}.dump());
}

std::unique_ptr<bootstrap::HalBootstrap> Context::next_bootstrap() {
  return std::make_unique<bootstrap::HalBootstrap>(store_, "comm" + std::to_string(comm_seq_++) + "/");
}

std::unique_ptr<hal::Communicator> Context::make_comm(const bootstrap::HalBootstrap& bs, uint32_t device) {
  hal_comm_create_args_t args{};
  args.struct_size = sizeof(args);
  args.device = device;
  args.rank = rank();
  args.world_size = world();
  args.bootstrap = bs.table();
  args.timeout_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(opts_.op_timeout).count());
  return std::make_unique<hal::Communicator>(plugin_, args);
}

void Context::store_barrier(const std::string& name) {
  const std::string key = "barrier/" + name + "/";
  store_->set(key + std::to_string(rank()), {1});
  for (uint32_t r = 0; r < world(); ++r) {
    if (!store_->get(key + std::to_string(r), opts_.op_timeout)) {
      throw Failure{"rank " + std::to_string(r) + " did not reach '" + name + "' in time"};
    }
  }
}

std::string message_of(const char* m) {
  constexpr size_t kMax = 4096;
  if (m == nullptr) return "(NULL)";
  const size_t n = ::strnlen(m, kMax + 1);
  return std::string(m, std::min(n, kMax)) + (n > kMax ? "... (cut)" : "");
}

void expect(bool cond, const std::string& what) {
  if (!cond) throw Failure{what};
}

void expect_status(hal_status_t got, hal_status_t want, const std::string& call) {
  if (got != want) {
    throw Failure{call + " returned " + hal_status_name(got) + ", expected " + hal_status_name(want)};
  }
}

void run_suite(Context& ctx) {
  const uint32_t from = ctx.opts().from_group;
  const uint32_t lifecycle = kGroupCount - 1;
  void (*const groups[])(Context&) = {run_abi_checks,    run_error_checks,     run_device_checks,
                                      run_kernel_checks, run_telemetry_checks, run_coll_checks,
                                      run_fault_checks,  run_lifecycle_checks};
  static_assert(sizeof(groups) / sizeof(groups[0]) == kGroupCount);
  // The lifecycle checks load and unload the plugin themselves: a worker
  // resumed there does not load it first.
  if (from < lifecycle) {
    bool loaded = false;
    ctx.run("load", [&] {
      hal::LoadOptions lo;
      lo.options = ctx.opts().plugin_options;
      try {
        ctx.plugin() = hal::Plugin::load(ctx.opts().plugin, lo);
      } catch (const hal::PluginInitError& e) {
        // The plugin is sound but this machine has nothing for it to drive.
        if (e.code() == Code::unavailable) throw Skip{std::string("no device: ") + e.what()};
        throw;
      }
      loaded = true;
    });
    if (!loaded) {  // the load failure says why; nothing else can run
      ctx.stream(R"({"end": true})");
      return;
    }
  }
  if (from > 1 && ctx.plugin()) {  // resumed past the group that counts the devices
    uint32_t n = 0;
    if (ctx.plugin()->api().device->get_count(&n) == HAL_OK) ctx.set_device_count(n);
  }
  if (from > 5) ctx.comm_skip_reason = "no communicator: the coll group ended in a crash";
  for (uint32_t g = from; g < kGroupCount; ++g) {
    ctx.stream(nlohmann::json{{"group", g}, {"name", kGroups[g]}}.dump());
    groups[g](ctx);
    if (g + 1 == lifecycle) ctx.run("unload", [&] { ctx.plugin().reset(); });
  }
  ctx.stream(R"({"end": true})");
}

}  // namespace sigma::conformance
