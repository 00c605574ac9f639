// Which devices serve a job (pure logic: read from src/): the start waits
// for every device or the validation timeout, a job of plain programs ends
// done, the silent devices are dropped after the timeout, too few devices
// end the job with how many could serve, and a crashed device is validated
// again only within its budget.
#include "runtime/agent/admission.hpp"

#include <gtest/gtest.h>

namespace sigma::runtime::agent {
namespace {

using Kind = Admission::StartVerdict::Kind;

// World 2, 3 devices (one spare), 5 s to validate, one readmission.
Admission two_of_three() { return Admission(2, 3, 5, 1); }

Admission::Census census(uint32_t passed, uint32_t starting, uint32_t out = 0) {
  Admission::Census c;
  c.passed = passed;
  c.starting = starting;
  c.out = out;
  c.running = true;
  return c;
}

TEST(Admission, TheJobStartsWhenEveryDeviceWasHeardOrTheTimeoutPassed) {
  const Admission a = two_of_three();
  EXPECT_EQ(a.start(census(2, 1), 1).kind, Kind::wait);  // one still validating: wait for it
  EXPECT_EQ(a.start(census(3, 0), 1).kind, Kind::start);
  EXPECT_EQ(a.start(census(2, 1), 5).kind, Kind::wait);  // at the timeout, not past it
  const auto late = a.start(census(2, 1), 5.5);
  EXPECT_EQ(late.kind, Kind::start);  // enough passed: the slow one is not waited for
  EXPECT_FALSE(late.drop_silent);
}

TEST(Admission, DevicesSilentPastTheTimeoutAreDroppedAndTooFewEndTheJob) {
  const Admission a = two_of_three();
  // One passed, one failed its self-test, one never said hello.
  const auto v = a.start(census(1, 1, 1), 6);
  EXPECT_TRUE(v.drop_silent);
  EXPECT_EQ(v.kind, Kind::too_few);
  EXPECT_EQ(v.usable, 1u);
  // Before the timeout the silent one still counts: two of three may serve.
  const auto early = a.start(census(1, 1, 1), 4);
  EXPECT_EQ(early.kind, Kind::wait);
  EXPECT_FALSE(early.drop_silent);
  EXPECT_EQ(early.usable, 2u);
  EXPECT_EQ(a.start(census(0, 0, 2), 1).kind, Kind::too_few);
}

TEST(Admission, AJobOfPlainProgramsThatExitedZeroIsDone) {
  const Admission a = two_of_three();
  Admission::Census c;
  c.plain = 2;
  c.starting = 1;
  c.running = false;
  EXPECT_EQ(a.start(c, 1).kind, Kind::plain_program_done);
  c.running = true;  // one still running: not yet
  EXPECT_EQ(a.start(c, 1).kind, Kind::wait);
  c.running = false;
  c.out = 1;  // one crashed: not a plain job that ran to its end
  EXPECT_NE(a.start(c, 1).kind, Kind::plain_program_done);
}

TEST(Admission, ACrashedDeviceIsValidatedAgainOnlyWithinItsBudget) {
  Admission a = two_of_three();
  EXPECT_TRUE(a.may_readmit(1, true, true));
  EXPECT_FALSE(a.may_readmit(1, false, true));  // the device said it was lost
  EXPECT_FALSE(a.may_readmit(1, true, false));  // not cordoned: the scheduler decided otherwise
  EXPECT_EQ(a.readmit(1), 1u);
  EXPECT_FALSE(a.may_readmit(1, true, true));  // budget of one spent
  EXPECT_TRUE(a.may_readmit(2, true, true));   // another device's budget is its own
  EXPECT_EQ(a.budget(), 1u);
  EXPECT_FALSE(Admission(2, 3, 5, 0).may_readmit(0, true, true));  // no readmission by default
}

}  // namespace
}  // namespace sigma::runtime::agent
