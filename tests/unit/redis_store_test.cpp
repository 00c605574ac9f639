// The bootstrap store against a real redis-server (started by the "redis"
// CTest fixture, which writes its port to a file).
#include <sigma/bootstrap.hpp>
#include <sigma/error.hpp>

#include <gtest/gtest.h>

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
