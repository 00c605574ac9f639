// Session::run: the training loop every framework would otherwise write
// again: join, steps, the rollbacks they decide and the windows those skip,
// recovery from a failure, finish. It only sequences the session's own
// calls and the caller's hooks; every decision is the session's or the
// step's.
#include <sigma/runtime.hpp>

#include <optional>
#include <string>
#include <utility>

namespace sigma::runtime {

namespace {

class Runner {
 public:
  Runner(Session& s, const Loop& loop) : s_(s), loop_(loop) {
    if (!loop_.step) throw Error(Code::invalid_argument, "runtime: run: the loop has no step");
  }

  std::optional<uint64_t> run() {
    try {
      step_ = s_.join();  // a rank (spares wait here), the state (fresh or restored)
      generation();
    } catch (const Error& e) {
      if (s_.ended()) return std::nullopt;  // a spare never needed
      note(e);
    }
    for (;;) {
      while (step_ < loop_.total_steps || failed_) {
        if (failed_) {
          if (!recover()) return std::nullopt;
          continue;
        }
        try {
          one_step();
        } catch (const Error& e) {
          // A step a contained re-form voided runs again; nothing was applied.
          if (!s_.take_void_step()) note(e);
        }
      }
      try {
        s_.finish(step_);
        return step_;
      } catch (const Error& e) {
        note(e);  // a peer failed in the last steps: recover, run them again
      }
    }
  }

 private:
  // A failure to recover from, or one that ends the loop: the agent gone,
  // or a mistake in the program (running it again fails again).
  void note(const Error& e) {
    if (s_.agent_gone() || e.code() == Code::invalid_argument || e.code() == Code::not_supported) throw e;
    failed_ = e;
  }

  void generation() {
    if (loop_.on_generation) loop_.on_generation(step_);
  }

  // Recovers until an assignment works out (a peer may die meanwhile).
  // False: the agent retired this worker.
  bool recover() {
    try {
      step_ = s_.recover(*failed_);  // new communicator, state restored (memory tier or disk)
      failed_.reset();
      generation();
    } catch (const Error& e) {
      if (s_.ended()) return false;  // retired: moved off a suspect device, or the job paused
      note(e);
    }
    return true;
  }

  void one_step() {
    s_.step_begin(step_);  // heartbeats say which step we are in
    StepOutcome out = loop_.step(step_, s_.batch_of(step_));
    if (out.rollback) {
      step_ = s_.rollback(*out.rollback);  // own snapshot back, the window skipped
      said_ = "rolled back: " + out.rollback->reason;
      if (loop_.on_rollback) loop_.on_rollback(step_, *out.rollback);
      return;
    }
    if (!said_.empty()) out.report.note = said_ + (out.report.note.empty() ? "" : "; " + out.report.note);
    s_.step_end(step_, out.report);  // to the agent; memory snapshot and disk checkpoint when due
    said_.clear();
    if (loop_.on_step_done) loop_.on_step_done(step_);
    ++step_;
  }

  Session& s_;
  const Loop& loop_;
  uint64_t step_ = 0;
  std::optional<Error> failed_;
  std::string said_;  // a rollback, said with the next finished step's note
};

}  // namespace

std::optional<uint64_t> Session::run(const Loop& loop) { return Runner(*this, loop).run(); }

std::optional<uint64_t> Session::run(uint64_t total_steps, const std::function<void(uint64_t)>& step_fn) {
  Loop loop;
  loop.total_steps = total_steps;
  loop.step = [&step_fn](uint64_t step, uint64_t) {
    step_fn(step);
    return StepOutcome{};
  };
  return run(loop);
}

}  // namespace sigma::runtime
