// Strict reading of YAML configuration files, shared by libsigma's parsers
// of user-written YAML (cluster-simulator scenarios, guardrail configs, plan
// requests): unknown keys, wrong types and out-of-range values are refused
// with "file:line: key: why". A static helper linked into libsigma and its
// tools; not part of the public API (a plugin carries its own: vendors/sim).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace sigma::yaml {

// Thrown by Reader with the complete message ("file:line: key: why").
struct Refused {
  std::string message;
};

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }

  // Throws Refused naming the file, the line of `at` (0 when unknown) and key.
  [[noreturn]] void fail(const YAML::Node& at, const std::string& key, const std::string& why) const;
  // `map` must be a mapping whose keys are all in `allowed`.
  void only_keys(const YAML::Node& map, const std::string& path,
                 std::initializer_list<const char*> allowed) const;
  // A finite number in [lo, hi].
  double number(const YAML::Node& n, const std::string& key, double lo, double hi) const;
  // A whole number in [lo, hi] (digits only: no sign, no exponent).
  uint64_t integer(const YAML::Node& n, const std::string& key, uint64_t lo, uint64_t hi) const;
  std::string text(const YAML::Node& n, const std::string& key) const;
  // true/false (also yes/no, on/off as YAML 1.1 has them).
  bool boolean(const YAML::Node& n, const std::string& key) const;

 private:
  std::string file_;
};

// Parses `text` (named `file` in messages). Refuses absurd nesting before
// yaml-cpp's recursion can exhaust the stack, a second document ("---")
// with the line it starts on, and turns syntax errors into
// "file:line: (syntax): why". Throws Refused.
YAML::Node parse(const std::string& text, const std::string& file);

// Reads a whole regular file of at most `max_bytes`, never blocking on a
// FIFO. Throws Refused ("path:0: (file): cannot open (...)" / "not a
// regular file (a FIFO)" / "larger than ...").
std::string read_file(const std::string& path, uint64_t max_bytes = uint64_t{1} << 20);

}  // namespace sigma::yaml
