// Every file a user names is read only when it is a regular file, and no
// name can block the reader: a FIFO is refused at once (a blocking open would
// hang a plugin's init, an agent's pre-flight or a command for ever), as are
// a folder and a device. A YAML file holding a second document is refused
// with the line it starts on, not read as its first document alone.
#include <sigma/error.hpp>
#include <sigma/guardrails.hpp>
#include <sigma/planner.hpp>
#include <sigma/sim.hpp>

#include "regular_file.hpp"
#include "yaml_reader.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace {

namespace fs = std::filesystem;

// A folder of this test's own, with a FIFO in it that no one ever writes.
class UserFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "user-files-" + std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fifo_ = dir_ + "/fifo.yaml";
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0600), 0);
    // A reader that blocks on the FIFO fails here in 20 s, not at CTest's limit.
    ::alarm(20);
  }
  void TearDown() override {
    ::alarm(0);
    fs::remove_all(dir_);
  }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  std::string dir_, fifo_;
};

// `read(path)` throws a sigma::Error whose message holds `expect`.
void expect_refused(const std::function<void()>& read, const std::string& expect) {
  try {
    read();
    ADD_FAILURE() << "accepted; expected a refusal with '" << expect << "'";
  } catch (const sigma::Error& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
  }
}

TEST_F(UserFiles, TheReaderRefusesAFifoAFolderAndADeviceByKind) {
  std::string out, why;
  EXPECT_FALSE(sigma::files::read_regular(fifo_, 1 << 20, out, why));
  EXPECT_EQ(why, "not a regular file (a FIFO)");
  EXPECT_FALSE(sigma::files::read_regular(dir_, 1 << 20, out, why));
  EXPECT_EQ(why, "not a regular file (a folder)");
  EXPECT_FALSE(sigma::files::read_regular("/dev/zero", 1 << 20, out, why));
  EXPECT_EQ(why, "not a regular file (a device)");
  EXPECT_FALSE(sigma::files::read_regular(dir_ + "/missing", 1 << 20, out, why));
  EXPECT_NE(why.find("cannot open (No such file"), std::string::npos) << why;
  EXPECT_FALSE(sigma::files::read_regular(write("big", std::string(100, 'x')), 99, out, why));
  EXPECT_EQ(why, "larger than 99 bytes");
  ASSERT_TRUE(sigma::files::read_regular(write("ok", "abc"), 3, out, why)) << why;
  EXPECT_EQ(out, "abc");
}

TEST_F(UserFiles, EveryLoaderOfAUserFileRefusesAFifoByName) {
  const std::string fifo_msg = fifo_ + ":0: (file): not a regular file (a FIFO)";
  expect_refused([&] { sigma::guardrails::Config::from_yaml_file(fifo_); }, fifo_msg);
  const auto model =
      sigma::sim::load_failure_model(std::string(SIGMA_SOURCE_DIR) + "/data/failure-model.json");
  expect_refused([&] { sigma::sim::load_scenario(fifo_, model); }, fifo_msg);
  expect_refused([&] { sigma::sim::load_failure_model(fifo_); }, "not a regular file (a FIFO)");
  expect_refused([&] { sigma::guardrails::Config::from_yaml_file(dir_); }, "not a regular file (a folder)");
}

TEST_F(UserFiles, ASecondYamlDocumentIsRefusedWithTheLineItStartsOn) {
  const std::string two = "seed: 1\n---\nseed: 2\n";
  try {
    sigma::yaml::parse(two, "two.yaml");
    ADD_FAILURE() << "a second document was accepted";
  } catch (const sigma::yaml::Refused& r) {
    EXPECT_EQ(r.message.rfind("two.yaml:3: (top): a second YAML document starts here", 0), 0u) << r.message;
  }
  // One document, with or without its markers, is still one.
  EXPECT_NO_THROW(sigma::yaml::parse("---\nseed: 1\n...\n", "one.yaml"));
  EXPECT_NO_THROW(sigma::yaml::parse("", "empty.yaml"));
  // Through each parser of user YAML.
  expect_refused(
      [&] { sigma::guardrails::Config::from_yaml_file(write("g.yaml", "loss_scale: {}\n---\nx: 1\n")); },
      "g.yaml:3: (top): a second YAML document");
  expect_refused([&] { sigma::planner::parse_request("model: {}\n---\nmodel: {}\n", "req.yaml"); },
                 "req.yaml:3: (top): a second YAML document");
}

// yaml-cpp's LoadAll never returns on this text (found by fuzz_guardrails):
// its parser yields the same empty document at the same place forever.
TEST_F(UserFiles, TextTheYamlParserCannotGetPastIsRefusedNotLoopedOn) {
  const std::string stuck = ",precision: [1, {a:\"[";
  try {
    sigma::yaml::parse(stuck, "stuck.yaml");
    ADD_FAILURE() << "text the parser cannot read was accepted";
  } catch (const sigma::yaml::Refused& r) {
    EXPECT_EQ(r.message,
              "stuck.yaml:1: (syntax): the text cannot be read as YAML from here (the parser makes "
              "no progress)");
  }
  expect_refused([&] { sigma::guardrails::Config::from_yaml_file(write("s.yaml", stuck)); },
                 "s.yaml:1: (syntax): the text cannot be read as YAML");
}

}  // namespace
