// The conformance suite's shared pieces: one rank's context and the check
// runner. Every rank runs the same checks in the same order, because creating
// a communicator and posting a collective are collective calls.
#pragma once

#include <sigma/bootstrap.hpp>
#include <sigma/hal.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sigma::conformance {

enum class Outcome { pass, fail, skip };
const char* outcome_name(Outcome o);

struct Result {
  std::string name;  // "group.check", e.g. "coll.matrix.all_reduce.f32"
  Outcome outcome = Outcome::pass;
  std::string detail;
  double seconds = 0;
};

// Thrown by a check body to end it as skipped (with the reason) or failed.
struct Skip {
  std::string reason;
};
struct Failure {
  std::string message;
};

struct Options {
  std::string plugin;          // name or path, as given
  std::string plugin_options;  // hal_init_args_t.options
  uint32_t rank = 0;
  uint32_t world = 1;
  std::string store_uri;  // bootstrap store shared by the ranks (file:// or redis://)
  uint64_t large_count = 262147;
  std::chrono::milliseconds op_timeout{60000};  // a collective that takes longer failed
  // A worker process under supervision: each check's start and result go
  // to this file descriptor as JSON lines (supervise.hpp), and the checks
  // start at group `from_group` (kGroups), after a crash in an earlier one.
  int stream_fd = -1;
  uint32_t from_group = 0;
};

// The check groups, in the order they run; a crashed group's successor is
// where a restarted worker resumes.
inline constexpr const char* kGroups[] = {"abi",       "errors", "device", "kernels",
                                          "telemetry", "coll",   "fault",  "lifecycle"};
inline constexpr uint32_t kGroupCount = sizeof(kGroups) / sizeof(kGroups[0]);

class Context {
 public:
  explicit Context(Options opts);

  const Options& opts() const { return opts_; }
  uint32_t rank() const { return opts_.rank; }
  uint32_t world() const { return opts_.world; }
  hal::PluginPtr& plugin() { return plugin_; }
  const std::shared_ptr<bootstrap::Store>& store() const { return store_; }
  const std::vector<Result>& results() const { return results_; }

  // Runs `body`, recording pass, fail (Failure, sigma::Error or any exception)
  // or skip. A body that records nothing and returns passed.
  void run(const std::string& name, const std::function<void()>& body);
  // Records a result without running anything.
  void record(const std::string& name, Outcome outcome, std::string detail);
  // One JSON line to the supervisor (nothing without a stream).
  void stream(const std::string& json_line);

  // A bootstrap for a new communicator; the key prefix is unique per call and
  // identical on every rank as long as every rank makes the same calls.
  std::unique_ptr<bootstrap::HalBootstrap> next_bootstrap();
  // Creates a communicator over all ranks of the suite, or throws sigma::Error.
  std::unique_ptr<hal::Communicator> make_comm(const bootstrap::HalBootstrap& bs, uint32_t device = 0);
  // Waits until every rank reached the same named point (through the store).
  void store_barrier(const std::string& name);

  // Whether the plugin has at least one device; checks that need one skip.
  bool has_device() const { return device_count_ > 0; }
  uint32_t device_count() const { return device_count_; }
  void set_device_count(uint32_t n) { device_count_ = n; }
  // Whether communicators over this world can be made (decided once).
  bool comm_ok = false;
  std::string comm_skip_reason;

 private:
  Options opts_;
  hal::PluginPtr plugin_;
  std::shared_ptr<bootstrap::Store> store_;
  std::vector<Result> results_;
  uint64_t comm_seq_ = 0;
  uint32_t device_count_ = 0;
};

// Failure helpers: throw Failure with a message when the condition is false.
void expect(bool cond, const std::string& what);
// A plugin's get_last_error() text, safe to print: "(NULL)" for NULL, cut
// at 4 KiB.
std::string message_of(const char* m);
// Expects `got` == `want` for a status, naming the call.
void expect_status(hal_status_t got, hal_status_t want, const std::string& call);

// The check groups, in the order they run.
void run_abi_checks(Context& ctx);
void run_error_checks(Context& ctx);
void run_device_checks(Context& ctx);
void run_kernel_checks(Context& ctx);
void run_telemetry_checks(Context& ctx);
void run_coll_checks(Context& ctx);
void run_fault_checks(Context& ctx);
// Needs the context's plugin released first: it loads and unloads by itself.
void run_lifecycle_checks(Context& ctx);

// Runs everything for this rank.
void run_suite(Context& ctx);

}  // namespace sigma::conformance
