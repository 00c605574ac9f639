// Writes the compatibility fixture with this build's engine:
//   checkpoint_fixture_writer DIR
// DIR/compat/ then holds steps 1 (a base) and 2 (a delta) of both ranks of
// compat_state.hpp, with their global manifests. Run once per format
// version and commit the result as tests/checkpoint/compat/format-vN/; a
// fixture once committed is never rewritten.
#include "compat_state.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  using namespace sigma::checkpoint;
  if (argc != 2) {
    std::fprintf(stderr, "usage: checkpoint_fixture_writer DIR\n");
    return 2;
  }
  try {
    for (uint64_t step = 1; step <= 2; ++step)
      for (uint32_t rank = 0; rank < compat::kWorld; ++rank) {
        Engine e(compat::compat_options(argv[1], rank, compat::kWorld));
        compat::CompatState s(step, rank);
        const SaveResult r = e.save(s.views(rank), compat::compat_meta(step, rank));
        std::printf("step %llu rank %u: %s (%s, %llu of %llu bytes stored)\n",
                    static_cast<unsigned long long>(step), rank, r.path.c_str(), r.base ? "base" : "delta",
                    static_cast<unsigned long long>(r.stored_bytes),
                    static_cast<unsigned long long>(r.raw_bytes));
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
