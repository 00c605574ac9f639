// The session's non-tensor state (pure logic: read from src/): items keep
// their places and bytes through a snapshot's region, a rollback leaves the
// kept ones as they are, the skipped windows travel and merge, and a region
// no save wrote is refused.
#include "runtime/state_items.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace sigma::runtime {
namespace {

// A string item over `value`; `restored` counts restore calls.
StateItem item(const std::string& name, std::string& value, int& restored, bool kept = false,
               uint64_t max = 64) {
  StateItem it;
  it.name = name;
  it.max_bytes = max;
  it.save = [&value] { return value; };
  it.restore = [&value, &restored](std::string_view b) {
    value.assign(b.data(), b.size());
    ++restored;
  };
  it.kept_on_rollback = kept;
  return it;
}

// The region's bytes, as a snapshot copies them.
std::vector<uint8_t> snapshot(StateItems& items) {
  items.save();
  const auto v = items.view();
  const auto* p = static_cast<const uint8_t*>(v.data);
  return {p, p + v.bytes()};
}

void restore_region(StateItems& items, const std::vector<uint8_t>& bytes) {
  const auto v = items.view();
  ASSERT_EQ(v.bytes(), bytes.size());
  std::memcpy(v.data, bytes.data(), bytes.size());
}

TEST(StateItems, EachItemGetsBackTheBytesOfTheStateRestored) {
  StateItems items;
  std::string a = "policy-1", b = std::string("\0binary\xff", 8);
  int ra = 0, rb = 0;
  items.add(item("a", a, ra));
  items.add(item("b", b, rb));
  const auto snap = snapshot(items);
  a = "policy-2";
  b = "";
  restore_region(items, snap);
  items.restore(false);
  EXPECT_EQ(a, "policy-1");
  EXPECT_EQ(b, std::string("\0binary\xff", 8));
  EXPECT_EQ(ra, 1);
  EXPECT_EQ(rb, 1);
  EXPECT_EQ(items.view().name, StateItems::kTensor);
  // Each place is [u32 length][max_bytes], after the skipped windows' own.
  EXPECT_EQ(items.view().bytes(), (4 + StateItems::kMaxWindows * 16) + 2 * (4 + 64));
}

TEST(StateItems, ARollbackLeavesTheKeptItemsAndTheSkippedWindowsAsTheyAreNow) {
  StateItems items;
  std::string policy = "old", placement = "old";
  int rp = 0, rl = 0;
  items.add(item("policy", policy, rp, /*kept=*/true));
  items.add(item("placement", placement, rl));
  const auto snap = snapshot(items);
  policy = placement = "new";
  items.skip(10, 12);
  restore_region(items, snap);
  items.restore(/*rollback=*/true);
  EXPECT_EQ(policy, "new");  // remembers the spike it rolled back from
  EXPECT_EQ(rp, 0);
  EXPECT_EQ(placement, "old");
  EXPECT_EQ(items.skipped(), (std::vector<std::pair<uint64_t, uint64_t>>{{10, 12}}));
  // A recovery takes everything back, the windows too.
  items.restore(false);
  EXPECT_EQ(policy, "old");
  EXPECT_TRUE(items.skipped().empty());
}

TEST(StateItems, SkippedWindowsMergeAndMoveEveryLaterStepsBatch) {
  StateItems items;
  EXPECT_EQ(items.batch_of(7), 7u);
  items.skip(10, 12);
  items.skip(11, 15);  // overlaps: one window
  items.skip(20, 21);
  items.skip(5, 5);  // empty: nothing
  EXPECT_EQ(items.skipped(), (std::vector<std::pair<uint64_t, uint64_t>>{{10, 15}, {20, 21}}));
  EXPECT_EQ(items.batch_of(9), 9u);
  EXPECT_EQ(items.batch_of(10), 15u);  // the 10th batch not skipped
  EXPECT_EQ(items.batch_of(14), 19u);
  EXPECT_EQ(items.batch_of(15), 21u);
  // They travel with the state: a restored rank skips them too.
  const auto snap = snapshot(items);
  StateItems other;
  restore_region(other, snap);
  other.restore(false);
  EXPECT_EQ(other.skipped(), items.skipped());
  EXPECT_EQ(other.batch_of(15), 21u);
}

TEST(StateItems, TooManyWindowsAreRefusedNotTruncated) {
  StateItems items;
  for (uint64_t i = 0; i < StateItems::kMaxWindows; ++i) items.skip(3 * i, 3 * i + 1);
  EXPECT_EQ(items.skipped().size(), StateItems::kMaxWindows);
  try {
    items.skip(10000, 10001);
    FAIL() << "a window past the limit was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
  }
  EXPECT_EQ(items.skipped().size(), StateItems::kMaxWindows);  // nothing lost either
}

TEST(StateItems, AnItemLargerThanItsPlaceIsRefusedAtTheSave) {
  StateItems items;
  std::string v(65, 'x');
  int r = 0;
  items.add(item("big", v, r, false, 64));
  try {
    items.save();
    FAIL() << "65 bytes went into a 64-byte place";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("'big' saved 65 bytes"), std::string::npos) << e.what();
  }
}

TEST(StateItems, BadRegistrationsAreRefusedByName) {
  StateItems items;
  std::string v;
  int r = 0;
  items.add(item("a", v, r));
  for (const std::string& name : {std::string("a"), std::string(StateItems::kSkipped), std::string()}) {
    try {
      items.add(item(name, v, r));
      FAIL() << "'" << name << "' was taken";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::invalid_argument);
    }
  }
  StateItem no_restore = item("c", v, r);
  no_restore.restore = nullptr;
  EXPECT_THROW(items.add(no_restore), Error);
}

TEST(StateItems, ARegionNoSaveWroteIsDataLossNotAnOverrun) {
  StateItems items;
  std::string v = "ok";
  int r = 0;
  items.add(item("a", v, r));
  auto snap = snapshot(items);
  // The item's length word says more than its place holds.
  const uint64_t at = 4 + StateItems::kMaxWindows * 16;
  const uint32_t huge = 1000;
  std::memcpy(snap.data() + at, &huge, 4);
  restore_region(items, snap);
  try {
    items.restore(false);
    FAIL() << "a length past the place was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::data_loss);
  }
  // Windows out of order.
  snap = snapshot(items);
  const uint32_t two = 32;
  const uint64_t w[4] = {10, 12, 5, 6};
  std::memcpy(snap.data(), &two, 4);
  std::memcpy(snap.data() + 4, w, sizeof w);
  restore_region(items, snap);
  EXPECT_THROW(items.restore(false), Error);
}

}  // namespace
}  // namespace sigma::runtime
