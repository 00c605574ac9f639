#include "runtime/channel.hpp"

#include <sigma/error.hpp>

#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace sigma::runtime {

namespace {

sockaddr_un address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) {
    throw Error(Code::invalid_argument, "runtime: socket path too long (" + std::to_string(path.size()) +
                                            " bytes, at most " + std::to_string(sizeof(a.sun_path) - 1) +
                                            "): " + path);
  }
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

}  // namespace

Channel::~Channel() {
  if (fd_ >= 0) ::close(fd_);
}

std::unique_ptr<Channel> Channel::connect(const std::string& path) {
  const sockaddr_un a = address(path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(Code::unavailable, std::string("runtime: socket: ") + std::strerror(errno));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(Code::unavailable, "runtime: cannot reach the agent at " + path + ": " + std::strerror(e));
  }
  return std::make_unique<Channel>(fd);
}

bool Channel::send(const nlohmann::json& msg) {
  const std::string line = msg.dump() + "\n";
  std::lock_guard<std::mutex> lk(send_mu_);
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::optional<nlohmann::json> Channel::pop_line() {
  for (;;) {
    const size_t nl = buffer_.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    std::string line = buffer_.substr(0, nl);
    buffer_.erase(0, nl + 1);
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.is_object()) return j;
  }
}

bool Channel::fill() {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }
}

std::optional<nlohmann::json> Channel::receive(std::chrono::milliseconds timeout) {
  if (auto j = pop_line()) return j;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!closed_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    if (!fill()) return pop_line();
    if (auto j = pop_line()) return j;
  }
  return pop_line();
}

std::optional<nlohmann::json> Channel::receive_ready() {
  if (auto j = pop_line()) return j;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return std::nullopt;
  fill();
  return pop_line();
}

void Channel::shutdown() { ::shutdown(fd_, SHUT_RDWR); }

int listen_unix(const std::string& path) {
  const sockaddr_un a = address(path);
  ::unlink(path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(Code::unavailable, std::string("runtime: socket: ") + std::strerror(errno));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 256) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(Code::unavailable, "runtime: cannot listen at " + path + ": " + std::strerror(e));
  }
  return fd;
}

}  // namespace sigma::runtime
