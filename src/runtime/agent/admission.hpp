// Which devices serve the job, for the agent's Coordinator: when the job
// starts (enough devices passed their self-test, and every device was heard
// or the validation timeout passed), when a job of plain programs is done,
// when the devices that never said hello are dropped, when too few are left
// to start; and whether a device whose worker crashed is validated again by
// a fresh worker (at most readmit_crashed times).
//
// Pure: a census and a clock in, a verdict out. Thread-safety: one thread
// at a time.
#pragma once

#include <cstdint>
#include <map>

namespace sigma::runtime::agent {

class Admission {
 public:
  // The devices before the start, as the Coordinator counts them.
  struct Census {
    uint32_t passed = 0;    // validated and waiting as spares
    uint32_t starting = 0;  // their worker has not said hello yet
    uint32_t out = 0;       // dead (other than a plain program that finished) or retired
    uint32_t plain = 0;     // a program without the session that ran to its end
    bool running = false;   // some worker process still exists
  };
  struct StartVerdict {
    enum class Kind : uint8_t {
      wait,                // not yet
      start,               // give the ranks to the lowest devices that passed
      plain_program_done,  // every worker was a plain program that exited 0
      too_few,             // fewer devices can serve than the world needs
    };
    Kind kind = Kind::wait;
    bool drop_silent = false;  // the devices still starting never said hello in time
    uint32_t usable = 0;       // too_few: the devices that could still serve
  };

  Admission(uint32_t world, uint32_t devices, double validate_timeout_s, uint32_t readmit_crashed)
      : world_(world), devices_(devices), validate_timeout_s_(validate_timeout_s), budget_(readmit_crashed) {}

  StartVerdict start(const Census& c, double t) const;

  // A device whose worker failed: it may be validated again when its
  // process went (crashed, or killed for not answering or not beating)
  // while the device never said it was lost, it is cordoned, and its
  // budget is not spent.
  bool may_readmit(uint32_t device, bool process_went, bool cordoned) const;
  // Counts one readmission of `device`; returns how many it has had.
  uint32_t readmit(uint32_t device) { return ++readmitted_[device]; }
  uint32_t budget() const { return budget_; }

 private:
  uint32_t world_, devices_;
  double validate_timeout_s_;
  uint32_t budget_;
  std::map<uint32_t, uint32_t> readmitted_;  // device -> readmissions after a crash
};

}  // namespace sigma::runtime::agent
