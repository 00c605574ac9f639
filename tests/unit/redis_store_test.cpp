// The bootstrap store against a real redis-server (started by the "redis"
// CTest fixture, which writes its port to a file).
#include <sigma/bootstrap.hpp>
#include <sigma/error.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace sigma::bootstrap {
namespace {

using namespace std::chrono_literals;

int redis_port() {
  std::ifstream in(std::string(SIGMA_REDIS_FIXTURE_DIR) + "/port");
  int port = 0;
  in >> port;
  return port;
}

std::string unique_prefix() {
  return std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
         std::to_string(::getpid()) + "/";
}

// A "server" that accepts and never answers: every call returns within its
// bound (a get within the caller's timeout, a set within 5 s), as an error.
TEST(RedisStore, AServerThatNeverAnswersCannotHoldACallerPastItsBound) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  RedisStore store("127.0.0.1", ntohs(a.sin_port));  // the kernel accepts for the silent listener
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(store.get("k", 300ms), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "get outlived its 300 ms";
  t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(store.set("k", {1}), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 7s) << "set outlived its 5 s bound";
  ::close(fd);
}

TEST(RedisStore, SetThenGetRoundTripsBinaryValues) {
  RedisStore store("127.0.0.1", redis_port(), unique_prefix());
  std::vector<uint8_t> v = {0, 1, 2, 255, 0, 10};
  store.set("k", v);
  EXPECT_EQ(*store.get("k", 1s), v);
  store.set("empty", {});
  EXPECT_TRUE(store.get("empty", 1s)->empty());
}

TEST(RedisStore, PrefixesKeepJobsApart) {
  RedisStore a("127.0.0.1", redis_port(), unique_prefix() + "a/");
  RedisStore b("127.0.0.1", redis_port(), unique_prefix() + "b/");
  a.set("k", {1});
  EXPECT_FALSE(b.get("k", 50ms).has_value());
}

TEST(RedisStore, GetWaitsForALaterSetAndTimesOutOtherwise) {
  auto store = std::make_shared<RedisStore>("127.0.0.1", redis_port(), unique_prefix());
  std::thread writer([&] {
    std::this_thread::sleep_for(100ms);
    RedisStore("127.0.0.1", redis_port(), unique_prefix()).set("late", {7});
  });
  auto v = store->get("late", 10s);
  writer.join();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ((*v)[0], 7);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(store->get("never", 100ms).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(RedisStore, OpenStoreParsesTheUriAndItsPrefix) {
  auto s = open_store("redis://127.0.0.1:" + std::to_string(redis_port()) + "/job42");
  EXPECT_EQ(s->uri(), "redis://127.0.0.1:" + std::to_string(redis_port()) + "/job42");
  EXPECT_THROW(open_store("redis://127.0.0.1:notaport"), Error);
  EXPECT_THROW(open_store("redis://:6379"), Error);
}

TEST(RedisStore, AnUnreachableServerIsUnavailableWithTheAddress) {
  try {
    RedisStore store("127.0.0.1", 1, "x/");  // nothing listens on port 1
    FAIL() << "connected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::unavailable);
    EXPECT_NE(std::string(e.what()).find("redis://127.0.0.1:1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sigma::bootstrap
