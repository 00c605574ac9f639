// The worker side of ranks.hpp: a rank program's main parses
// "WORKER CASE RANK WORLD DIR", runs the case with a file store in DIR, and
// reports a failure on stderr naming the rank (exit 1; a usage error 2).
#pragma once

#include <sigma/bootstrap.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <string>

namespace sigma::test {

struct RankCase {
  std::string name, dir;
  uint32_t rank = 0, world = 0;
  std::shared_ptr<bootstrap::FileStore> store;  // where the ranks' communicators meet
};

inline int rank_main(int argc, char** argv, const std::function<void(const RankCase&)>& run) {
  if (argc != 5) {
    std::cerr << "usage: " << argv[0] << " CASE RANK WORLD DIR\n";
    return 2;
  }
  RankCase c{argv[1], argv[4], static_cast<uint32_t>(std::stoul(argv[2])),
             static_cast<uint32_t>(std::stoul(argv[3])), nullptr};
  try {
    c.store = std::make_shared<bootstrap::FileStore>(c.dir + "/store");
    run(c);
  } catch (const std::exception& e) {
    std::cerr << "rank " << c.rank << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace sigma::test
