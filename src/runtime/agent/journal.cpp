#include "runtime/agent/journal.hpp"

#include <sigma/error.hpp>
#include <sigma/health.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace sigma::runtime::agent {

Journal::Journal(const std::string& path, double t0, AgentObserver observer)
    : f_(std::fopen(path.c_str(), "a")), t0_(t0), observer_(std::move(observer)) {
  if (f_ == nullptr)
    throw Error(Code::unavailable, "agent: cannot open the journal " + path + ": " + std::strerror(errno));
}

Journal::~Journal() { std::fclose(f_); }

void Journal::write(const nlohmann::json& record) {
  const double t = health::monotonic_s() - t0_;
  nlohmann::json line{{"t", t}};
  line.update(record);
  const std::string s = line.dump();
  std::fwrite(s.data(), 1, s.size(), f_);
  std::fputc('\n', f_);
  std::fflush(f_);
  if (observer_) observer_(AgentEvent{t, line.value("event", std::string()), s});
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    if (!f) throw Error(Code::unavailable, "agent: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error(Code::unavailable, "agent: cannot rename " + tmp + ": " + std::strerror(errno));
  }
}

}  // namespace sigma::runtime::agent
