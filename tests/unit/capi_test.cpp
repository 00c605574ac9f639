// The C API's boundary: whatever an entry's body throws becomes a status and
// the calling thread's message; damaged state has a status of its own.
#include "capi/capi.hpp"

#include <gtest/gtest.h>

#include <string>

namespace sigma::capi {
namespace {

TEST(CApi, DataLossHasItsOwnStatusNotInternal) {
  const sigma_status_t st = guarded(
      "sigma_x", [] { throw Error(Code::data_loss, "checkpoint: data.bin: chunk 3 fails its xxh3"); });
  EXPECT_EQ(st, SIGMA_ERR_DATA_LOSS);
  EXPECT_STREQ(sigma_status_name(st), "SIGMA_ERR_DATA_LOSS");
  EXPECT_EQ(std::string(sigma_last_error()), "sigma_x: checkpoint: data.bin: chunk 3 fails its xxh3");
}

TEST(CApi, EveryKindOfExceptionBecomesAStatusWithItsMessage) {
  EXPECT_EQ(guarded("sigma_x", [] { throw Error(Code::timeout, "late"); }), HAL_ERR_TIMEOUT);
  EXPECT_EQ(std::string(sigma_last_error()), "sigma_x: late");
  EXPECT_EQ(guarded("sigma_x", [] { throw std::runtime_error("plain"); }), HAL_ERR_INTERNAL);
  EXPECT_EQ(std::string(sigma_last_error()), "sigma_x: plain");
  EXPECT_EQ(guarded("sigma_x", [] { throw 42; }), HAL_ERR_INTERNAL);
  EXPECT_NE(std::string(sigma_last_error()).find("not a std::exception"), std::string::npos);
  EXPECT_EQ(guarded("sigma_x", [] {}), SIGMA_OK);
  EXPECT_EQ(std::string(sigma_last_error()), "");
}

}  // namespace
}  // namespace sigma::capi
