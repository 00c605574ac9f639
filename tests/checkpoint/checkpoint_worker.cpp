// A process that saves one checkpoint of the test state and exits, for the
// tests that kill it mid-save (SIGMA_CHECKPOINT_CRASH_AT) or give it a full
// disk (a file-size limit).
//   checkpoint_worker DIR STEP [max_file_bytes]
// Exit: 0 saved; 3 the save failed cleanly (message on stdout) and the
// tensors are as they were; anything else is a defect.
#include <sigma/checkpoint.hpp>

#include "state.hpp"

#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const uint64_t step = std::strtoull(argv[2], nullptr, 10);
  if (argc > 3) {
    // A full disk, for real: writes past the limit fail with EFBIG.
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[3], nullptr, 10)};
    setrlimit(RLIMIT_FSIZE, &lim);
  }
  const sigma::checkpoint::Options o = sigma::checkpoint::testing::test_options(argv[1]);
  sigma::checkpoint::testing::State s(step);
  try {
    sigma::checkpoint::Engine e(o);
    e.save(s.views(), sigma::checkpoint::testing::meta_for(step));
  } catch (const sigma::Error& err) {
    std::printf("%s\n", err.what());
    return s == sigma::checkpoint::testing::State(step) ? 3 : 4;
  }
  return 0;
}
