// The job report's figures, pure: a report.json and a journal in, the
// incidents, the time lost and the summary out; report.html is one page
// with every chart.
#include "report/figures.hpp"

#include <gtest/gtest.h>

namespace {

using json = nlohmann::json;
using sigma_report::Figures;

json report() {
  json steps = json::array();
  for (int s = 0; s < 20; ++s)
    steps.push_back({{"t", 1.0 + 0.5 * s},
                     {"step", s},
                     {"seconds", 0.5},
                     {"loss", 3.0 - 0.05 * s},
                     {"tokens", 1000},
                     {"flops", 1e9},
                     {"peak_flops", 4e9}});
  // A rollback from the reached step 20 to 17: steps 17..19 again.
  for (int s = 17; s < 20; ++s)
    steps.push_back(
        {{"t", 11.0 + 0.5 * (s - 17)}, {"step", s}, {"seconds", 0.5}, {"loss", 2.1}, {"tokens", 1000}});
  return {{"status", "done"},
          {"steps", 20},
          {"wall_s", 20.0},
          {"world", 2},
          {"spares", 1},
          {"median_step_s", 0.5},
          {"ledger", {{"goodput", 0.9}, {"lost_s", {{"detection", 0.1}, {"restore", 0.2}}}}},
          {"incidents", json::array({{{"cause", "device 1 (rank 1): process killed by signal Killed"},
                                      {"fault_s", 4.0},
                                      {"restore", "memory"},
                                      {"index", 6},
                                      {"recomputed_steps", 0},
                                      {"back_at_reached_step_s", 0.3}}})},
          {"series",
           {{"steps", steps},
            {"devices", json::array({{{"t", 1.0}, {"device", 0}, {"temperature_c", 58.0}},
                                     {{"t", 2.0}, {"device", 0}, {"temperature_c", 59.0}}})},
            {"notes", json::array({{{"t", 10.9}, {"step", 17}, {"note", "rolled back: loss spike: ..."}},
                                   {{"t", 12.0},
                                    {"step", 19},
                                    {"note",
                                     "skipped: replicated gradients differ on rank(s) 1 from the majority; "
                                     "rebalanced: rank 0 slow for 3 steps: 400 link retries/s"}}})}}}};
}

std::vector<json> journal() {
  return {{{"event", "scheduler"}, {"action", "assign"}, {"rank", 0}, {"device", 0}, {"t", 0.5}},
          {{"event", "scheduler"}, {"action", "assign"}, {"rank", 1}, {"device", 1}, {"t", 0.5}},
          {{"event", "scheduler"},
           {"action", "replace"},
           {"rank", 1},
           {"device", 1},
           {"to_device", 2},
           {"t", 4.1}},
          {{"event", "health_state"}, {"device", 0}, {"to", "suspect"}, {"message", "hot"}, {"t", 3.0}}};
}

TEST(ReportFigures, IncidentsAreTimedAttributedAndPricedAndTheNotesSplit) {
  const json ref = report();
  const Figures f = sigma_report::compute(report(), journal(), &ref);
  std::vector<std::string> kinds;
  for (const auto& i : f.incidents) kinds.push_back(i.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"health suspect", "crash", "loss spike", "silent corruption",
                                             "slow link"}));
  EXPECT_EQ(f.incidents[1].device, "device 1");
  EXPECT_EQ(f.incidents[3].device, "device 2") << "rank 1 was on device 2 after the replacement";
  EXPECT_EQ(f.incidents[4].device, "device 0");
  EXPECT_EQ(f.rolled_back_steps, 3u) << "reached 20, back to 17";
  EXPECT_EQ(f.skipped_steps, 1u);
  EXPECT_DOUBLE_EQ(f.incidents[2].lost_s, 1.5);
  double lost = 0;
  for (const auto& [cause, s] : f.lost_s) lost += s;
  EXPECT_DOUBLE_EQ(lost, 0.1 + 0.2 + 0.5 + 1.5);
  EXPECT_NEAR(f.mfu, 20e9 / (0.5 * 23) / 4e9, 1e-12) << "FLOP/s while stepping over the peak";
  EXPECT_GT(f.tokens_per_s, 0);
  EXPECT_EQ(f.reference_loss.x.size(), 23u);
  EXPECT_EQ(sigma_report::to_json(f)["incidents"].size(), 5u);
  const std::string text = sigma_report::summary(f);
  EXPECT_NE(text.find("silent corruption (device 2)"), std::string::npos) << text;
}

TEST(ReportFigures, AJobWithoutFiguresSaysNotAvailableAndStillDrawsEveryChart) {
  json r = report();
  r["series"]["steps"] = json::array();
  const Figures f = sigma_report::compute(r, {}, nullptr);
  EXPECT_LT(f.mfu, 0);
  EXPECT_LT(f.tokens_per_s, 0);
  EXPECT_NE(sigma_report::summary(f).find("MFU n/a"), std::string::npos);
  const std::string page = sigma_report::html(f);
  for (const char* id : {"loss", "step-time", "temperature", "timeline", "goodput", "precision"})
    EXPECT_NE(page.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_EQ(page.find("<script"), std::string::npos) << "self-contained, no script";
}

// Precision notes: an incident each, never a skipped step; the steps each
// layer ran in f32 as spans (one still open at the end runs to the last
// step); another run's loss drawn by its label.
TEST(ReportFigures, EscalationsAreIncidentsAndSpansAndACompareRunIsDrawn) {
  json r = report();
  r["series"]["notes"] = json::array(
      {{{"t", 3.0}, {"step", 4}, {"note", "escalated b1.attn to f32: activation amax 5000 leaves 3.7 bits"}},
       {{"t", 5.0},
        {"step", 8},
        {"note",
         "skipped: the loss is not finite: step skipped; escalated b0.experts to f32: 1 overflowing "
         "steps; returned b1.attn to f16: calm for 3 steps, headroom 9 bits"}}});
  const json other = report();
  const Figures f = sigma_report::compute(r, {}, nullptr, {{"escalation off", other}});
  std::vector<std::string> kinds;
  for (const auto& i : f.incidents) kinds.push_back(i.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"precision escalated", "crash", "skipped step",
                                             "precision escalated", "precision returned"}));
  EXPECT_EQ(f.skipped_steps, 1u) << "a precision change skips nothing";
  ASSERT_EQ(f.f32_spans.size(), 2u);
  EXPECT_EQ(f.f32_spans[0].layer, "b1.attn");
  EXPECT_EQ(f.f32_spans[0].from, 5);
  EXPECT_EQ(f.f32_spans[0].to, 9);
  EXPECT_EQ(f.f32_spans[1].layer, "b0.experts");
  EXPECT_EQ(f.f32_spans[1].from, 9);
  EXPECT_EQ(f.f32_spans[1].to, 20) << "open to the end";
  ASSERT_EQ(f.compare_loss.size(), 1u);
  EXPECT_EQ(f.compare_loss[0].second.x.size(), 23u);
  const std::string page = sigma_report::html(f);
  EXPECT_EQ(page.find("no layer left its low precision"), std::string::npos);
  const auto loss = page.find("id=\"loss\"");
  const std::string loss_chart = page.substr(loss, page.find("</figure>", loss) - loss);
  EXPECT_NE(loss_chart.find("#9467BD"), std::string::npos) << "the compared run's line, in the fifth colour";
  EXPECT_THROW(sigma_report::parse_compare("no-equals"), std::invalid_argument);
  EXPECT_EQ(sigma_report::parse_compare("a=b=c"), (std::pair<std::string, std::string>{"a", "b=c"}));
}

}  // namespace
