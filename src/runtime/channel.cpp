#include "runtime/channel.hpp"

#include <sigma/error.hpp>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <set>

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

namespace {

std::unique_ptr<Channel> connect_tcp(const std::string& address) {
  const std::string rest = address.substr(6);
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) throw Error(Code::invalid_argument, "runtime: no port in " + address);
  const std::string host = rest.substr(0, colon), port = rest.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    throw Error(Code::unavailable, "runtime: cannot resolve " + address + ": " + ::gai_strerror(rc));
  }
  int err = 0;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      ::freeaddrinfo(res);
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return std::make_unique<Channel>(fd);
    }
    err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  throw Error(Code::unavailable, "runtime: cannot reach the agent at " + address + ": " + std::strerror(err));
}

}  // namespace

std::unique_ptr<Channel> Channel::connect(const std::string& path) {
  if (path.rfind("tcp://", 0) == 0) return connect_tcp(path);
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

namespace {

// Nonces this process accepted as a server: a connection replayed whole is
// refused. A few dozen bytes per connection ever made to this agent.
std::mutex g_nonces_mu;
std::set<std::string> g_nonces;

// What the MAC covers: the connection, the direction, the place, the body.
std::string sealed_text(const std::string& nonce, bool from_client, uint64_t seq, const std::string& body) {
  return "sigma-channel\n" + nonce + (from_client ? "\nc\n" : "\ns\n") + std::to_string(seq) + "\n" + body;
}

}  // namespace

void Channel::authenticate(const JobKey& key, bool client) {
  key_ = key;
  client_ = client;
  if (client) nonce_ = random_hex(16);
}

bool Channel::send(const nlohmann::json& msg) {
  std::lock_guard<std::mutex> lk(send_mu_);
  std::string line;
  if (key_) {
    const std::string body = msg.dump();
    nlohmann::json outer = {
        {"n", sent_}, {"b", body}, {"a", mac_hex(*key_, sealed_text(nonce_, client_, sent_, body))}};
    if (client_ && sent_ == 0) outer["c"] = nonce_;
    ++sent_;
    line = outer.dump() + "\n";
  } else {
    line = msg.dump() + "\n";
  }
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
    if (key_) {
      if (!j.is_discarded() && j.is_object()) {
        if (auto m = open_sealed(j)) return m;
      } else {
        refuse("a line that is not an authenticated message");
      }
      return std::nullopt;  // the connection is closed
    }
    if (!j.is_discarded() && j.is_object()) return j;
  }
}

void Channel::refuse(const std::string& why) {
  forged_ = closed_ = true;
  refusal_ = why;
  buffer_.clear();
  ::shutdown(fd_, SHUT_RDWR);
}

std::optional<nlohmann::json> Channel::open_sealed(const nlohmann::json& outer) {
  const auto text = [&](const char* k) {
    return outer.contains(k) && outer[k].is_string() ? outer[k].get<std::string>() : std::string();
  };
  if (!client_ && nonce_.empty()) {  // the first line names the connection
    const std::string c = text("c");
    if (c.size() != 32 || c.find_first_not_of("0123456789abcdef") != std::string::npos) {
      refuse("a first message without the connection's nonce (a peer without the job's secret?)");
      return std::nullopt;
    }
    std::lock_guard<std::mutex> lk(g_nonces_mu);
    if (!g_nonces.insert(c).second) {
      refuse("a connection replayed (its nonce was seen before)");
      return std::nullopt;
    }
    nonce_ = c;
  }
  const std::string body = text("b"), mac = text("a");
  if (!outer.contains("n") || !outer["n"].is_number_unsigned() || outer["n"].get<uint64_t>() != received_) {
    refuse("a message out of sequence (expected " + std::to_string(received_) + ")");
    return std::nullopt;
  }
  if (!mac_ok(*key_, sealed_text(nonce_, !client_, received_, body), mac)) {
    refuse("a message whose authentication code is wrong (forged, altered, or another job's secret)");
    return std::nullopt;
  }
  ++received_;
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    refuse("an authenticated message that is not a JSON object");
    return std::nullopt;
  }
  return j;
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
    bytes_read_ += static_cast<uint64_t>(n);
    buffer_.append(buf, static_cast<size_t>(n));
    if (buffer_.size() > kMaxMessage && buffer_.find('\n') == std::string::npos) {
      // Control messages are small; a line this long is a broken or hostile
      // peer. Hang up rather than keep reading it.
      oversized_ = closed_ = true;
      buffer_.clear();
      ::shutdown(fd_, SHUT_RDWR);
      return false;
    }
    return true;
  }
}

std::optional<nlohmann::json> Channel::receive(std::chrono::milliseconds timeout) {
  if (auto j = pop_line()) return j;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!closed_) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
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

namespace sigma::runtime {

int listen_tcp(const std::string& host, int* port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), "0", &hints, &res); rc != 0) {
    throw Error(Code::unavailable, "runtime: cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  int fd = -1, err = 0;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 256) != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) throw Error(Code::unavailable, "runtime: cannot listen on " + host + ": " + std::strerror(err));
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port)
                                  : ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  return fd;
}

}  // namespace sigma::runtime
