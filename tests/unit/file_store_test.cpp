#include <sigma/bootstrap.hpp>
#include <sigma/error.hpp>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

namespace sigma::bootstrap {
namespace {

using namespace std::chrono_literals;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("sigma-store-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST_F(FileStoreTest, SetThenGetReturnsTheValue) {
  FileStore store(dir_);
  store.set("rank0/addr", bytes("127.0.0.1:4242"));
  auto v = store.get("rank0/addr", 1s);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, bytes("127.0.0.1:4242"));
  store.set("rank0/addr", bytes("x"));
  EXPECT_EQ(*store.get("rank0/addr", 1s), bytes("x"));
  store.set("empty", {});
  EXPECT_TRUE(store.get("empty", 1s)->empty());
}

TEST_F(FileStoreTest, GetOfAMissingKeyTimesOutWithinItsBound) {
  FileStore store(dir_);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(store.get("never", 100ms).has_value());
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 100ms);
  EXPECT_LT(took, 2s);
}

TEST_F(FileStoreTest, KeysWithSlashesDotsAndBytesDoNotCollideOrEscape) {
  FileStore store(dir_);
  const std::vector<std::string> keys = {
      "a/b", "a%2Fb", "..", ".", "../escape", "a b", std::string("n\0l", 3)};
  for (size_t i = 0; i < keys.size(); ++i) store.set(keys[i], {static_cast<uint8_t>(i)});
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(store.get(keys[i], 1s)->at(0), i) << keys[i];
  // Nothing was written outside the store's folder.
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir_).parent_path() / "escape"));
  EXPECT_THROW(store.set("", {1}), Error);
}

TEST_F(FileStoreTest, ValuesOverOneMebibyteAreRefused) {
  FileStore store(dir_);
  try {
    store.set("big", std::vector<uint8_t>((1u << 20) + 1));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("1 MiB"), std::string::npos);
  }
}

TEST_F(FileStoreTest, AWaitingReaderSeesAValueAnotherProcessWritesLater) {
  FileStore store(dir_);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::this_thread::sleep_for(150ms);
    FileStore(dir_).set("late", bytes("from the child"));
    ::_exit(0);
  }
  auto v = store.get("late", 10s);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, bytes("from the child"));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(FileStoreTest, ConcurrentWritersNeverExposeAPartialValue) {
  auto store = std::make_shared<FileStore>(dir_);
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) store->set("shared", std::vector<uint8_t>(4096, static_cast<uint8_t>(t)));
    });
  }
  for (int i = 0; i < 200; ++i) {
    auto v = store->get("shared", 5s);
    ASSERT_TRUE(v.has_value());
    ASSERT_EQ(v->size(), 4096u);
    for (uint8_t b : *v) ASSERT_EQ(b, (*v)[0]);
  }
  for (auto& w : writers) w.join();
}

TEST_F(FileStoreTest, HalBootstrapCallbacksPrefixKeysAndReportFullSize) {
  auto store = std::make_shared<FileStore>(dir_);
  HalBootstrap bs(store, "comm7/");
  const hal_bootstrap_t* t = bs.table();
  ASSERT_GE(t->struct_size, HAL_BOOTSTRAP_V1_0_SIZE);
  EXPECT_EQ(t->kv_set(t->ctx, "id", "abcdef", 6), HAL_OK);
  EXPECT_EQ(*store->get("comm7/id", 1s), bytes("abcdef"));
  char buf[4] = {0};
  uint64_t size = 0;
  EXPECT_EQ(t->kv_get(t->ctx, "id", buf, sizeof(buf), &size, 1'000'000'000ull), HAL_OK);
  EXPECT_EQ(size, 6u);  // the full size, though only 4 bytes fit
  EXPECT_EQ(std::string(buf, 4), "abcd");
  EXPECT_EQ(t->kv_get(t->ctx, "missing", buf, sizeof(buf), &size, 1'000'000ull), HAL_ERR_TIMEOUT);
  EXPECT_EQ(t->kv_get(t->ctx, nullptr, buf, sizeof(buf), &size, 0), HAL_ERR_INVALID_ARGUMENT);
  std::vector<uint8_t> big((1u << 20) + 1);
  EXPECT_EQ(t->kv_set(t->ctx, "big", big.data(), big.size()), HAL_ERR_INVALID_ARGUMENT);
  // A size far past the buffer is refused before a byte is read (ASan would
  // see the overread), and so is an over-long key.
  const uint8_t small[8] = {};
  EXPECT_EQ(t->kv_set(t->ctx, "lies", small, uint64_t{1} << 40), HAL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t->kv_set(t->ctx, "lies", small, (uint64_t{1} << 20) + 7), HAL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t->kv_set(t->ctx, std::string(5000, 'k').c_str(), small, 8), HAL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(t->store_uri), "file://" + dir_);
  EXPECT_EQ(std::string(t->key_prefix), "comm7/");
}

// hal.h's key rule, both sides of it: every key of 1 to 1024 bytes (any
// byte but NUL) round-trips, distinct long keys stay distinct, and an empty
// or 1025-byte key is INVALID_ARGUMENT from both callbacks.
TEST_F(FileStoreTest, EveryKeyTheHalAllowsWorksAndNoOtherDoes) {
  auto store = std::make_shared<FileStore>(dir_);
  HalBootstrap bs(store, "comm/");
  const hal_bootstrap_t* t = bs.table();
  std::string high(300, 'k');
  for (size_t i = 0; i < high.size(); i += 3) high[i] = static_cast<char>(0xc3);
  const std::vector<std::string> allowed = {"k",
                                            std::string(300, 'x'),
                                            std::string(100, '/'),
                                            std::string(1024, '/'),
                                            std::string(1023, '/') + "a",
                                            std::string(HAL_BOOTSTRAP_MAX_KEY_BYTES, 'y'),
                                            high,
                                            "a key/with spaces/../and dots"};
  for (size_t i = 0; i < allowed.size(); ++i) {
    const std::string v = "value-" + std::to_string(i);
    ASSERT_EQ(t->kv_set(t->ctx, allowed[i].c_str(), v.data(), v.size()), HAL_OK) << allowed[i].size();
  }
  for (size_t i = 0; i < allowed.size(); ++i) {
    char buf[32] = {};
    uint64_t size = 0;
    ASSERT_EQ(t->kv_get(t->ctx, allowed[i].c_str(), buf, sizeof buf, &size, 1'000'000'000ull), HAL_OK)
        << allowed[i].size();
    EXPECT_EQ(std::string(buf, size), "value-" + std::to_string(i))
        << "key of " << allowed[i].size() << " bytes";
  }
  char buf[8];
  uint64_t size = 0;
  for (const std::string& k : {std::string(), std::string(HAL_BOOTSTRAP_MAX_KEY_BYTES + 1, 'z')}) {
    EXPECT_EQ(t->kv_set(t->ctx, k.c_str(), "v", 1), HAL_ERR_INVALID_ARGUMENT) << k.size();
    EXPECT_EQ(t->kv_get(t->ctx, k.c_str(), buf, sizeof buf, &size, 1'000'000ull), HAL_ERR_INVALID_ARGUMENT)
        << k.size();
  }
}

TEST_F(FileStoreTest, ACallbackAfterTheBootstrapIsGoneIsAnErrorNotFreedMemory) {
  auto store = std::make_shared<FileStore>(dir_);
  auto bs = std::make_unique<HalBootstrap>(store, "comm9/");
  const hal_bootstrap_t kept = *bs->table();  // what a plugin that forgot to let go holds
  EXPECT_EQ(kept.kv_set(kept.ctx, "k", "v", 1), HAL_OK);
  bs.reset();  // comm_destroy
  EXPECT_EQ(kept.kv_set(kept.ctx, "k", "v", 1), HAL_ERR_INVALID_ARGUMENT);
  char buf[4];
  uint64_t size = 0;
  EXPECT_EQ(kept.kv_get(kept.ctx, "k", buf, sizeof buf, &size, 0), HAL_ERR_INVALID_ARGUMENT);
}

TEST(OpenStore, UnknownSchemeIsRefusedWithTheUri) {
  try {
    open_store("zk://host:2181");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("zk://host:2181"), std::string::npos);
  }
}

}  // namespace
}  // namespace sigma::bootstrap
