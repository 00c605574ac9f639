// A worker of an older protocol, as a stale build or another project's
// client would be: it greets the agent with a version-1 hello (no version
// field), prints the agent's answer and exits 3. Raw socket code on
// purpose: it must not share libsigma's protocol code with the agent.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main() {
  const char* path = std::getenv("SIGMA_AGENT_SOCKET");
  const char* device = std::getenv("SIGMA_DEVICE");
  if (path == nullptr || device == nullptr) return 2;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path, sizeof(a.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return 2;
  const std::string hello = std::string("{\"type\":\"hello\",\"device\":") + device +
                            ",\"pid\":1,\"self_test\":{\"passed\":true,\"detail\":\"ok\"}}\n";
  if (::write(fd, hello.data(), hello.size()) != static_cast<ssize_t>(hello.size())) return 2;
  std::string answer;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') answer += c;
  std::fprintf(stderr, "old_protocol_worker: the agent answered: %s\n", answer.c_str());
  return 3;
}
