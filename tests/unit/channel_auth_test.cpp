// Authenticated channels and the job secret: what a peer without the key,
// a tampering one or a replaying one gets (the connection closed, the
// reason said), over real socket pairs.
#include "runtime/channel.hpp"
#include "runtime/job_key.hpp"

#include <sigma/agent.hpp>
#include <sigma/error.hpp>

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

namespace sigma::runtime {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

std::pair<std::unique_ptr<Channel>, std::unique_ptr<Channel>> pair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {std::make_unique<Channel>(fds[0]), std::make_unique<Channel>(fds[1])};
}

// The raw bytes a channel sends, read off the other end of its socket.
std::string raw_line(int fd) {
  std::string out;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') out += c;
  return out;
}

const JobKey kKey = derive_key("the-job-secret-0123456789");

TEST(ChannelAuth, KeyedPeersTalkBothWays) {
  auto [client, server] = pair();
  client->authenticate(kKey, true);
  server->authenticate(kKey, false);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client->send({{"hello", i}}));
    const auto m = server->receive(1s);
    ASSERT_TRUE(m) << server->refusal();
    EXPECT_EQ((*m)["hello"], i);
    ASSERT_TRUE(server->send({{"ack", i}}));
    const auto r = client->receive(1s);
    ASSERT_TRUE(r) << client->refusal();
    EXPECT_EQ((*r)["ack"], i);
  }
  EXPECT_FALSE(server->forged());
}

TEST(ChannelAuth, APeerWithoutTheKeyOrAnotherKeyIsRefused) {
  {
    auto [client, server] = pair();
    server->authenticate(kKey, false);
    ASSERT_TRUE(client->send({{"kind", "node_hello"}}));  // plain JSON, no MAC
    EXPECT_FALSE(server->receive(1s));
    EXPECT_TRUE(server->forged() && server->closed());
    EXPECT_NE(server->refusal().find("nonce"), std::string::npos) << server->refusal();
  }
  {
    auto [client, server] = pair();
    client->authenticate(derive_key("another-job-secret-98765"), true);
    server->authenticate(kKey, false);
    ASSERT_TRUE(client->send({{"kind", "node_hello"}}));
    EXPECT_FALSE(server->receive(1s));
    EXPECT_TRUE(server->forged());
    EXPECT_NE(server->refusal().find("authentication code"), std::string::npos) << server->refusal();
  }
}

TEST(ChannelAuth, AnAlteredMessageOrOneMovedToAnotherConnectionIsRefused) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Channel client(fds[0]);
  client.authenticate(kKey, true);
  int tap[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, tap), 0);
  Channel server(tap[1]);
  server.authenticate(kKey, false);
  // A man in the middle: reads the client's lines, changes one, forwards.
  ASSERT_TRUE(client.send({{"spawn", "trainer"}}));
  ASSERT_TRUE(client.send({{"spawn", "trainer"}}));
  const std::string first = raw_line(fds[1]), second = raw_line(fds[1]);
  json altered = json::parse(second);
  altered["b"] = json{{"spawn", "sh"}}.dump();
  const std::string out = first + "\n" + altered.dump() + "\n";
  ASSERT_EQ(::write(tap[0], out.data(), out.size()), static_cast<ssize_t>(out.size()));
  EXPECT_TRUE(server.receive(1s));
  EXPECT_FALSE(server.receive(1s));
  EXPECT_NE(server.refusal().find("authentication code"), std::string::npos) << server.refusal();

  // The first line on a new connection under a nonce of its own: its MAC
  // was made over the old nonce, so it is refused.
  int tap2[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, tap2), 0);
  Channel server2(tap2[1]);
  server2.authenticate(kKey, false);
  json line = json::parse(first);
  line["c"] = random_hex(16);
  const std::string again = line.dump() + "\n";
  ASSERT_EQ(::write(tap2[0], again.data(), again.size()), static_cast<ssize_t>(again.size()));
  EXPECT_FALSE(server2.receive(1s));
  EXPECT_TRUE(server2.forged());
  ::close(fds[1]);
  ::close(tap[0]);
  ::close(tap2[0]);
}

TEST(ChannelAuth, AConnectionReplayedWholeIsRefused) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Channel client(fds[0]);
  client.authenticate(kKey, true);
  ASSERT_TRUE(client.send({{"kind", "node_hello"}, {"node", 1}}));
  const std::string recorded = raw_line(fds[1]) + "\n";
  for (int attempt = 0; attempt < 2; ++attempt) {
    int s[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
    Channel server(s[1]);
    server.authenticate(kKey, false);
    ASSERT_EQ(::write(s[0], recorded.data(), recorded.size()), static_cast<ssize_t>(recorded.size()));
    const auto m = server.receive(1s);
    if (attempt == 0) {
      EXPECT_TRUE(m) << server.refusal();  // the genuine first connection
    } else {
      EXPECT_FALSE(m);
      EXPECT_NE(server.refusal().find("replayed"), std::string::npos) << server.refusal();
    }
    ::close(s[0]);
  }
  ::close(fds[1]);
}

TEST(JobSecret, FromAPrivateFileOrTheEnvironmentAndRefusedOtherwise) {
  EXPECT_FALSE(read_job_secret("", nullptr));
  EXPECT_EQ(*read_job_secret("", "0123456789abcdef"), "0123456789abcdef");
  EXPECT_THROW(read_job_secret("", "short"), Error);
  const std::string f = ::testing::TempDir() + "secret-" + std::to_string(::getpid());
  std::ofstream(f) << "a-secret-of-enough-bytes\n";
  ::chmod(f.c_str(), 0644);
  try {
    read_job_secret(f, "ignored-when-a-file-is-given");
    FAIL() << "a file others can read was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mode 644"), std::string::npos) << e.what();
  }
  ::chmod(f.c_str(), 0600);
  EXPECT_EQ(*read_job_secret(f, nullptr), "a-secret-of-enough-bytes");
  std::filesystem::remove(f);
  EXPECT_THROW(read_job_secret(f, nullptr), Error);            // missing
  EXPECT_THROW(read_job_secret("/dev/null", nullptr), Error);  // not a regular file
  EXPECT_NE(mac_hex(derive_key("0123456789abcdef"), "m"), mac_hex(derive_key("0123456789abcdeg"), "m"));
}

}  // namespace
}  // namespace sigma::runtime
