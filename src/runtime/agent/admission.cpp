#include "runtime/agent/admission.hpp"

namespace sigma::runtime::agent {

Admission::StartVerdict Admission::start(const Census& c, double t) const {
  using Kind = StartVerdict::Kind;
  const bool all_heard = c.starting == 0;
  const bool waited = t > validate_timeout_s_;
  StartVerdict v;
  if (c.passed >= world_ && (all_heard || waited)) {
    v.kind = Kind::start;
    return v;
  }
  if (!c.running && c.out == 0 && c.plain >= world_) {
    v.kind = Kind::plain_program_done;
    return v;
  }
  v.drop_silent = waited && !all_heard;
  const uint32_t out = c.out + (v.drop_silent ? c.starting : 0);
  v.usable = devices_ > out ? devices_ - out : 0;
  if (v.usable < world_) v.kind = Kind::too_few;
  return v;
}

bool Admission::may_readmit(uint32_t device, bool process_went, bool cordoned) const {
  if (!process_went || !cordoned) return false;
  const auto it = readmitted_.find(device);
  return (it == readmitted_.end() ? 0 : it->second) < budget_;
}

}  // namespace sigma::runtime::agent
