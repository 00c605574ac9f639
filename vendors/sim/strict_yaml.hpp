// The sim vendor's strict reading of its scenario files (yaml-cpp under
// it): unknown keys, wrong types and out-of-range values are refused with
// "file:line: key: why". The vendor's own, as a plugin carries what it
// reads its configuration with (docs/hal.md: a plugin includes sigma/hal.h
// and its companion only).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace sim_vendor::yaml {

// Thrown with the complete message.
struct Refused {
  std::string message;
};

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  // Throws Refused naming the file, `at`'s line (0 when unknown) and key.
  [[noreturn]] void fail(const YAML::Node& at, const std::string& key, const std::string& why) const;
  // A mapping whose keys are all in `allowed`, none given twice.
  void only_keys(const YAML::Node& map, const std::string& path,
                 std::initializer_list<const char*> allowed) const;
  // A finite number in [lo, hi].
  double number(const YAML::Node& n, const std::string& key, double lo, double hi) const;
  // Digits only, in [lo, hi].
  uint64_t integer(const YAML::Node& n, const std::string& key, uint64_t lo, uint64_t hi) const;
  std::string text(const YAML::Node& n, const std::string& key) const;

 private:
  std::string file_;
};

// One YAML document from `text` (named `file` in messages): absurd nesting
// is refused before yaml-cpp recurses into it, a second document is
// refused with its line, a syntax error says its line. Throws Refused.
YAML::Node parse(const std::string& text, const std::string& file);

// A regular file of at most 1 MiB, opened without blocking (a FIFO is
// refused, never waited on). Throws Refused ("path:0: (file): why").
std::string read_file(const std::string& path);

}  // namespace sim_vendor::yaml
