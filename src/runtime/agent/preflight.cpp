#include "runtime/agent/preflight.hpp"
#include "runtime/job_key.hpp"

#include "runtime/agent/launcher.hpp"

#include <sigma/error.hpp>
#include <sigma/hal.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>

namespace sigma::runtime::agent {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void bad(const std::string& option, const std::string& why) {
  throw Error(Code::invalid_argument, "agent: " + option + " " + why);
}

void positive(double v, const char* option) {
  if (!std::isfinite(v) || !(v > 0)) bad(option, "must be a finite number above 0, not " + std::to_string(v));
}

void non_negative(double v, const char* option) {
  if (!std::isfinite(v) || !(v >= 0))
    bad(option, "must be a finite number of at least 0, not " + std::to_string(v));
}

}  // namespace

void check_options(const AgentOptions& o) {
  positive(o.heartbeat_s, "heartbeat (--heartbeat)");
  positive(o.heartbeat_timeout_s, "heartbeat timeout (--heartbeat-timeout)");
  positive(o.abort_grace_s, "abort grace (--abort-grace)");
  positive(o.recovery_timeout_s, "recovery timeout (--recovery-timeout)");
  positive(o.validate_timeout_s, "validate timeout");
  positive(o.health_time_scale, "health time scale (--health-time-scale)");
  non_negative(o.step_timeout_s, "step timeout (--step-timeout)");
  non_negative(o.failure_rate_per_device_hour, "failure rate (--failure-rate)");
  positive(o.repair_hours, "repair hours (--repair-hours)");
  positive(o.job_hours, "job hours (--job-hours)");
  if (o.metrics_port < -1 || o.metrics_port > 65535)
    bad("metrics port (--metrics-port)",
        "must be -1 (off), 0 (any) or a port up to 65535, not " + std::to_string(o.metrics_port));
  if (o.replicas < 1 || o.replicas > 2)
    bad("memory-tier replicas (--replicas)", "must be 1 or 2, not " + std::to_string(o.replicas));
  if (o.snapshot_every == 0) bad("snapshot period (--snapshot-every)", "must be at least 1 step");
  if (o.checkpoint_every > (uint64_t{1} << 40))
    bad("checkpoint period (--checkpoint-every)", "is not a step count (a negative number?)");
  if (o.nnodes > 1 && o.secret.empty())
    bad("job secret (--secret-file or SIGMA_JOB_SECRET)",
        "is needed with several agents: it authenticates the root and every message between hosts; give "
        "every agent the same one (e.g. export SIGMA_JOB_SECRET=$(openssl rand -hex 32))");
  if (!o.secret.empty()) read_job_secret("", o.secret.c_str());  // long enough, no NUL
}

JobDirLock::JobDirLock(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw Error(Code::invalid_argument, "job folder " + dir + " exists and is not a folder");
  fs::create_directories(dir, ec);
  if (ec) throw Error(Code::unavailable, "cannot make the job folder " + dir + ": " + ec.message());
  const std::string path = dir + "/sigmarun.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(Code::unavailable, "cannot write in the job folder " + dir + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
    ::close(fd_);
    fd_ = -1;
    throw Error(Code::unavailable, "job folder " + dir + " is in use by sigmarun pid " +
                                       (n > 0 ? std::string(pid, static_cast<size_t>(n)) : "(unknown)") +
                                       " (" + path + "); one agent per job folder");
  }
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    throw Error(Code::unavailable, "cannot write in the job folder " + dir + ": " + std::strerror(errno));
}

JobDirLock::~JobDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

namespace {

void write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// In the child: loads and unloads the vendor, then writes to `fd` what came
// of it: kLoaded, or why it failed. A plugin that ends the process itself
// (exit(0) in its init) writes neither.
constexpr char kLoaded[] = "loaded\n";
[[noreturn]] void load_in_child(const AgentOptions& o, int fd) {
  try {
    hal::LoadOptions lo;
    lo.options = vendor_options_for(o.vendor_options, 0);
    lo.job_dir = o.job_dir;
    hal::Plugin::load(o.vendor, lo).reset();
    write_all(fd, kLoaded);
    ::_exit(0);
  } catch (const std::exception& e) {
    write_all(fd, e.what());
    ::_exit(1);
  }
}

}  // namespace

int preflight_vendor(const AgentOptions& o, const std::function<int()>& stop_signal) {
  const std::string which =
      "vendor '" + o.vendor + "'" +
      (o.vendor_options.empty() ? "" : " with --vendor-options '" + o.vendor_options + "'");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(Code::unavailable, std::string("agent: pre-flight: pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(Code::unavailable, std::string("agent: pre-flight: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    load_in_child(o, fds[1]);
  }
  ::close(fds[1]);
  std::string why;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(o.validate_timeout_s);
  int stopped = 0;
  bool timed_out = false;
  for (bool open = true; open;) {
    if ((stopped = stop_signal()) != 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) why.append(buf, static_cast<size_t>(n));
    open = n > 0 || (n < 0 && errno == EINTR);
  }
  ::close(fds[0]);
  if (stopped != 0 || timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (stopped != 0) return stopped;
  if (timed_out)
    throw Error(Code::invalid_argument, which + " does not load: its init did not return within " +
                                            std::to_string(o.validate_timeout_s) + " s");
  if (why == kLoaded && WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  if (why.empty())
    why = WIFSIGNALED(status)
              ? std::string("loading it killed the process (") + strsignal(WTERMSIG(status)) + ")"
              : "loading it ended the process (exit status " + std::to_string(WEXITSTATUS(status)) + ")";
  throw Error(Code::invalid_argument, which + " does not load: " + why);
}

}  // namespace sigma::runtime::agent
