// sigmarun's exit status when the job ends (docs/sigmarun.md), for the
// root agent and its followers alike.
#pragma once

namespace sigma::runtime::agent::job_exit {

constexpr int done = 0;
constexpr int paused = 3;         // no spare left, or recovery failed: a rerun resumes
constexpr int unrecoverable = 4;  // no state to go on from, too few devices, or the root is gone
constexpr int stopped_by(int signal) { return 128 + signal; }

}  // namespace sigma::runtime::agent::job_exit
