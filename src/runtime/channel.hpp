// One connection between the agent and a worker (or another agent): a
// Unix or TCP stream socket carrying one JSON object per line, optionally
// authenticated with the job's key. Small control messages only (commands,
// heartbeats, step figures); tensors travel through the HAL, never here.
#pragma once

#include "runtime/job_key.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>

namespace sigma::runtime {

// Thread-safety: send() from any thread (serialised inside); receive() from
// one thread at a time. The fd is owned and closed by the destructor.
class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Connects to the agent: a Unix socket path, or "tcp://HOST:PORT" (an
  // agent on another host). Throws Error(unavailable) naming the address.
  static std::unique_ptr<Channel> connect(const std::string& address);

  // False when the peer is gone (the message is dropped).
  bool send(const nlohmann::json& msg);
  // The next message, waiting at most `timeout`; nullopt on timeout. Sets
  // closed() when the peer hung up. A line that is not JSON is skipped.
  std::optional<nlohmann::json> receive(std::chrono::milliseconds timeout);
  // Messages already read off the socket, without waiting (agent's poll loop:
  // call after poll() said the fd is readable).
  std::optional<nlohmann::json> receive_ready();
  bool closed() const { return closed_; }
  // The peer sent a line longer than kMaxMessage: the connection was closed
  // (closed() is true), so a peer cannot grow the reader without bound.
  bool oversized() const { return oversized_; }
  static constexpr size_t kMaxMessage = size_t{1} << 20;
  int fd() const { return fd_; }
  // Bytes read off the socket so far (the agent's inbound load).
  uint64_t bytes_read() const { return bytes_read_; }
  // Shuts the socket down so a blocked receive() returns (closed()).
  void shutdown();

  // From now on every message of this connection is authenticated with the
  // job's key (call before the first send or receive). Each line then
  // carries an HMAC-SHA-256 over the connection's nonce (the connecting
  // side, `client`, picks it and sends it with its first message), the
  // direction, a sequence number and the message; a peer without the key
  // can neither forge, alter, reorder nor replay one, nor replay a whole
  // earlier connection (a nonce is accepted once per process). A line that
  // fails closes the connection: closed() and forged() are true.
  void authenticate(const JobKey& key, bool client);
  bool forged() const { return forged_; }
  // Why the last line was refused ("" when none was).
  const std::string& refusal() const { return refusal_; }

 private:
  std::optional<nlohmann::json> pop_line();
  std::optional<nlohmann::json> open_sealed(const nlohmann::json& outer);  // authenticated lines
  void refuse(const std::string& why);
  bool fill();  // one read(); false when the peer hung up
  int fd_;
  bool closed_ = false;
  bool oversized_ = false;
  std::string buffer_;
  std::mutex send_mu_;
  std::optional<JobKey> key_;
  bool client_ = false;
  std::string nonce_;  // the connection's; the server learns it from the first line
  uint64_t sent_ = 0, received_ = 0;
  uint64_t bytes_read_ = 0;
  bool forged_ = false;
  std::string refusal_;
};

// A listening Unix socket at `path` (removed first if stale). Returns the fd.
// Throws Error(unavailable).
int listen_unix(const std::string& path);

// A listening TCP socket on `host` (an address or name of this machine) and
// a free port; *port gets the port. Throws Error(unavailable).
int listen_tcp(const std::string& host, int* port);

}  // namespace sigma::runtime
