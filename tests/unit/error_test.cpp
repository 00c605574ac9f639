#include <sigma/error.hpp>

#include <gtest/gtest.h>

namespace sigma {
namespace {

TEST(Error, EveryHalErrorMapsToItsOwnCodeAndBack) {
  for (hal_status_t s = HAL_ERR_MIN_V1; s <= HAL_OK; ++s) {
    const Code c = from_hal_status(s);
    EXPECT_EQ(to_hal_status(c), s) << hal_status_name(s);
  }
}

TEST(Error, UndefinedStatusesAreInternalAndNamedAsSuch) {
  EXPECT_EQ(from_hal_status(42), Code::internal);
  EXPECT_EQ(from_hal_status(-1000), Code::internal);
  EXPECT_EQ(hal_status_name(42), "undefined status 42");
  EXPECT_EQ(hal_status_name(HAL_ERR_DEVICE_LOST), "HAL_ERR_DEVICE_LOST");
}

TEST(Error, CodesTheSchedulerActsOnStayDistinct) {
  EXPECT_NE(code_name(Code::timeout), code_name(Code::aborted));
  EXPECT_NE(code_name(Code::device_lost), code_name(Code::unavailable));
  EXPECT_EQ(code_name(Code::data_loss), "data_loss");
  Error e(Code::device_lost, "device 3 fell off the bus");
  EXPECT_EQ(e.code(), Code::device_lost);
  EXPECT_STREQ(e.what(), "device 3 fell off the bus");
}

}  // namespace
}  // namespace sigma
