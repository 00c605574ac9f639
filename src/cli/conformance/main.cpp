// sigma-hal-conformance: checks a HAL plugin against ABI 1.0 to 1.3.
//
//   sigma-hal-conformance --plugin NAME|PATH [--ranks N] [--json FILE]
//                         [--timeout-s S] [--check-timeout-s S] [--op-timeout-ms MS]
//
// The checks run in worker processes, one per rank (one rank included),
// that meet through a store and stream each check's start and result to
// this process, the supervisor. A worker that exits, crashes or stays in
// one check past --check-timeout-s fails that check, naming the signal or
// status and the worker's last words; the other workers of the attempt are
// killed and new ones resume with the next check group. Exit status: 0
// every run check passed, 1 a check failed, 2 bad usage, 77 nothing could
// run because the plugin found no device.
#include "report.hpp"
#include "suite.hpp"
#include "supervise.hpp"

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

extern char** environ;

namespace sc = sigma::conformance;

namespace {

std::string make_temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "sigma-conformance-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary directory: " + std::string(std::strerror(errno)));
  }
  return tmpl;
}

std::string plugin_path_or_spec(const std::string& spec) {
  try {
    return sigma::hal::resolve_plugin(spec);
  } catch (const std::exception&) {
    return spec;
  }
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr size_t kMaxLine = 1 << 20;  // a streamed line longer than this is the worker's failure
constexpr double kCatchUpS = 5;       // after a stop, how long lagging peers may catch up

// The last non-empty line a worker wrote to stdout or stderr (read from at
// most its last 4 KiB); a sanitizer's SUMMARY line instead when there is one
// (its report ends in "ABORTING", which says nothing).
std::string last_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>(0, size - 4096));
  std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (const size_t s = tail.rfind("SUMMARY: "); s != std::string::npos) {
    return tail.substr(s,
                       tail.find('\n', s) == std::string::npos ? std::string::npos : tail.find('\n', s) - s);
  }
  while (!tail.empty() && std::isspace(static_cast<unsigned char>(tail.back()))) tail.pop_back();
  const size_t nl = tail.rfind('\n');
  return nl == std::string::npos ? tail : tail.substr(nl + 1);
}

// One worker: this program again, streaming to its fd 3 (the write end of
// a pipe whose read end `read_fd` gets), stdout and stderr into `log`.
pid_t spawn_worker(const sc::Options& base, uint32_t world, uint32_t rank, uint32_t group,
                   const std::string& store_uri, const std::string& log, int& read_fd) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return -1;
  std::vector<std::string> args = {"/proc/self/exe",
                                   "--plugin",
                                   base.plugin,
                                   "--ranks",
                                   std::to_string(world),
                                   "--worker-rank",
                                   std::to_string(rank),
                                   "--from-group",
                                   std::to_string(group),
                                   "--stream-fd",
                                   "3",
                                   "--store",
                                   store_uri,
                                   "--large-count",
                                   std::to_string(base.large_count),
                                   "--op-timeout-ms",
                                   std::to_string(base.op_timeout.count())};
  if (!base.plugin_options.empty()) {
    args.push_back("--options");
    args.push_back(base.plugin_options);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::posix_spawn_file_actions_adddup2(&fa, 1, 2);
  ::posix_spawn_file_actions_adddup2(&fa, p[1], 3);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  if (rc != 0) {
    ::close(p[0]);
    errno = rc;
    return -1;
  }
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  read_fd = p[0];
  return pid;
}

// Starts one worker process per rank from `group` on, feeds what they stream
// to `sup`, and returns when they are all done or one must be stopped (then
// every worker of the attempt is killed).
std::optional<sc::Stop> run_attempt(const sc::Options& base, uint32_t world, uint32_t group,
                                    const std::string& store_uri, const std::string& dir,
                                    sc::Supervision& sup) {
  struct Child {
    pid_t pid = -1;
    int fd = -1;  // the read end of its stream
    std::string buffer;
    std::string log;
    uintmax_t log_size = 0;
  };
  std::vector<Child> kids(world);
  auto drain = [&](uint32_t r) {
    Child& k = kids[r];
    char buf[65536];
    while (k.fd >= 0) {
      const ssize_t n = ::read(k.fd, buf, sizeof buf);
      if (n > 0) {
        k.buffer.append(buf, static_cast<size_t>(n));
        for (size_t nl; (nl = k.buffer.find('\n')) != std::string::npos;) {
          sup.line(r, k.buffer.substr(0, nl), now());
          k.buffer.erase(0, nl + 1);
        }
        if (k.buffer.size() > kMaxLine) {  // a line without end: the worker is broken
          sup.line(r, k.buffer.substr(0, 256), now());
          k.buffer.clear();
        }
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        ::close(k.fd);
        k.fd = -1;
      }
      return;
    }
  };
  for (uint32_t r = 0; r < world; ++r) {
    kids[r].log = dir + "/rank-" + std::to_string(r) + ".log";
    kids[r].pid = spawn_worker(base, world, r, group, store_uri, kids[r].log, kids[r].fd);
    if (kids[r].pid < 0)
      sup.exited(r, W_EXITCODE(127, 0), "cannot start: " + std::string(std::strerror(errno)), now());
  }
  auto kill_all = [&] {
    for (Child& k : kids) {
      if (k.pid > 0) {
        ::kill(k.pid, SIGKILL);
        ::waitpid(k.pid, nullptr, 0);
        k.pid = -1;
      }
      if (k.fd >= 0) ::close(k.fd), k.fd = -1;
    }
  };
  // Reads what the workers streamed and reaps the ones that ended.
  auto pump = [&] {
    std::vector<pollfd> fds;
    for (const Child& k : kids)
      if (k.fd >= 0) fds.push_back({k.fd, POLLIN, 0});
    if (!fds.empty()) {
      ::poll(fds.data(), fds.size(), 100);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (uint32_t r = 0; r < world; ++r) drain(r);
    for (uint32_t r = 0; r < world; ++r) {  // a hang's last words, as they come
      std::error_code ec;
      const auto size = std::filesystem::file_size(kids[r].log, ec);
      if (!ec && size != kids[r].log_size) {
        kids[r].log_size = size;
        sup.said(r, last_line(kids[r].log));
      }
    }
    for (uint32_t r = 0; r < world; ++r) {
      int st = 0;
      if (kids[r].pid > 0 && ::waitpid(kids[r].pid, &st, WNOHANG) == kids[r].pid) {
        kids[r].pid = -1;
        drain(r);  // what it wrote before it ended
        sup.exited(r, st, last_line(kids[r].log), now());
      }
    }
  };
  while (true) {
    pump();
    if (auto stop = sup.check(now())) {
      // Peers that lag behind through checks that do not synchronise may
      // first catch up (a few seconds at most), so their results count.
      for (const double until = now() + kCatchUpS; !sup.caught_up(*stop) && now() < until;) pump();
      kill_all();
      return stop;
    }
    if (sup.finished()) {
      kill_all();
      return std::nullopt;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Checks a libsigma HAL plugin against the HAL ABI 1 contract (1.0 to 1.3)"};
  sc::Options opts;
  uint32_t ranks = 1;
  int worker_rank = -1;
  int timeout_s = 900;
  int check_timeout_s = 0;
  int64_t op_timeout_ms = 60000;
  std::string json_path, store_uri;
  bool quiet = false;
  app.add_option("--plugin", opts.plugin, "plugin short name (cpu, skeleton, ...) or path to its .so")
      ->required();
  app.add_option("--ranks", ranks, "number of processes (ranks) to start")->check(CLI::Range(1u, 64u));
  app.add_option("--json", json_path, "write the JSON report here");
  app.add_option("--options", opts.plugin_options, "the plugin's init options string");
  app.add_option("--large-count", opts.large_count, "element count of the large collective cases");
  app.add_option("--timeout-s", timeout_s, "the whole suite: stop it, failed, after this many seconds")
      ->check(CLI::Range(1, 86400));
  app.add_option("--check-timeout-s", check_timeout_s,
                 "one check: a worker in the same check this long has hung and is killed "
                 "(default: 3 x --op-timeout-ms + 30 s)")
      ->check(CLI::Range(1, 86400));
  app.add_option("--op-timeout-ms", op_timeout_ms, "a collective slower than this fails")
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}));
  app.add_option("--store", store_uri,
                 "where the ranks meet: redis://host:port[/prefix] (a unique run key is appended) "
                 "or file:///dir; default: a file store in a temporary folder");
  app.add_flag("--quiet", quiet, "print only the summary line");
  // Worker mode, used by the parent process only.
  app.add_option("--worker-rank", worker_rank)->group("");
  app.add_option("--from-group", opts.from_group)->group("");
  app.add_option("--stream-fd", opts.stream_fd)->group("");
  CLI11_PARSE(app, argc, argv);
  opts.op_timeout = std::chrono::milliseconds(op_timeout_ms);

  try {
    if (worker_rank >= 0) {
      opts.rank = static_cast<uint32_t>(worker_rank);
      opts.world = ranks;
      opts.store_uri = store_uri;
      ::signal(SIGPIPE, SIG_IGN);  // a gone supervisor is a failed write, not a death
      sc::Context ctx(opts);
      sc::run_suite(ctx);
      return 0;
    }

    const std::string dir = make_temp_dir();
    if (store_uri.empty()) {
      opts.store_uri = "file://" + dir + "/store";
    } else {
      // Keys outlive a run in Redis: each run gets its own namespace.
      const std::string run = "conformance-" + std::to_string(::getpid()) + "-" +
                              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
      std::string base_uri = store_uri;
      while (!base_uri.empty() && base_uri.back() == '/') base_uri.pop_back();
      opts.store_uri = base_uri + "/" + run;
    }
    // Every mode runs the checks in worker processes: a plugin that exits,
    // crashes or hangs ends a worker, never the suite, and the suite names
    // the check and resumes with the next group.
    if (check_timeout_s == 0) check_timeout_s = static_cast<int>(3 * op_timeout_ms / 1000 + 30);
    std::vector<sc::Merged> extra;
    sc::Supervision sup(ranks, check_timeout_s, timeout_s, now());
    for (uint32_t group = 0, attempt = 0; group < sc::kGroupCount; ++attempt) {
      sup.begin_attempt(group, now());
      const std::string store = opts.store_uri + (opts.store_uri.rfind("file://", 0) == 0 ? "-" : "/") +
                                "attempt-" + std::to_string(attempt);
      const auto stop = run_attempt(opts, ranks, group, store, dir, sup);
      if (!stop) break;
      if (stop->final || stop->group + 1 >= sc::kGroupCount) break;  // its check's row says why
      group = stop->group + 1;
    }
    std::map<uint32_t, std::vector<sc::Result>> per_rank;
    for (uint32_t r = 0; r < ranks; ++r) per_rank[r] = sup.results()[r];
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);

    std::vector<sc::Merged> rows = sc::merge(per_rank, ranks);
    rows.insert(rows.end(), extra.begin(), extra.end());
    const sc::Summary s = sc::summarize(rows);
    const std::string path = plugin_path_or_spec(opts.plugin);
    if (quiet) {
      // Quiet still names what failed.
      std::vector<sc::Merged> failed;
      for (const auto& r : rows)
        if (r.outcome == sc::Outcome::fail) failed.push_back(r);
      if (!failed.empty()) sc::print_table(std::cout, failed);
    } else {
      std::cout << "HAL conformance: plugin " << opts.plugin << " (" << path << "), " << ranks
                << (ranks == 1 ? " rank" : " ranks") << ", ABI " << HAL_ABI_MAJOR << "." << HAL_ABI_MINOR
                << "\n\n";
      sc::print_table(std::cout, rows);
      std::cout << "\n";
    }
    const bool no_device =
        !rows.empty() && rows.front().name == "load" && rows.front().outcome == sc::Outcome::skip;
    std::cout << "conformance " << opts.plugin << " x" << ranks << ": " << s.passed << " passed, " << s.failed
              << " failed, " << s.skipped << " skipped"
              << (no_device ? " (" + rows.front().detail + ")" : std::string()) << "\n";
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << sc::report_json(opts.plugin, path, ranks, rows, s).dump(2) << "\n";
      if (!out) {
        std::cerr << "sigma-hal-conformance: cannot write " << json_path << "\n";
        return 2;
      }
    }
    if (s.failed > 0) return 1;
    return no_device ? 77 : 0;
  } catch (const std::exception& e) {
    std::cerr << "sigma-hal-conformance: " << e.what() << "\n";
    return 2;
  }
}
