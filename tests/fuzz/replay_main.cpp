// Replays a fuzz target over files, so the corpus is exercised by any
// compiler (CTest), not only under libFuzzer, and checks that the inputs
// meant to be valid are accepted (a replay that only proves "no crash"
// passes just as well when every input is refused at its first byte).
//
//   fuzz_X_replay [--expect FILE] [--valid DIR]... [DIR]...
//
// DIR: every file in it but *.md is replayed. --valid DIR: every file in it is
// replayed and must be accepted by some parser. --expect FILE: lines
// "NAME PARSER[,PARSER...]" (# comments): the replayed file NAME must be
// accepted by each PARSER named, and every other file of a DIR (a seed
// damaged on purpose) must be refused by all. A target reports what
// accepted an input through sigma_fuzz_accepted(parser).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::set<std::string> g_accepted;  // by the parsers of the input being replayed

struct Input {
  std::filesystem::path path;
  bool must_be_valid = false;
};

std::map<std::string, std::set<std::string>> read_expectations(const std::string& path, bool& ok) {
  std::map<std::string, std::set<std::string>> out;
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    ok = false;
  }
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name, parsers;
    if (!(ls >> name >> parsers)) {
      std::fprintf(stderr, "%s:%d: expected \"NAME PARSER[,PARSER...]\"\n", path.c_str(), line_no);
      ok = false;
      continue;
    }
    for (size_t at = 0; at <= parsers.size();) {
      const size_t comma = std::min(parsers.find(',', at), parsers.size());
      out[name].insert(parsers.substr(at, comma - at));
      at = comma + 1;
    }
  }
  return out;
}

std::string joined(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ",") + x;
  return out.empty() ? "nothing" : out;
}

}  // namespace

extern "C" void sigma_fuzz_accepted(const char* parser) { g_accepted.insert(parser); }

int main(int argc, char** argv) {
  bool ok = true;
  std::vector<Input> inputs;
  std::map<std::string, std::set<std::string>> expected;
  bool have_expect = false;  // then a corpus seed it does not list must be refused
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--expect" || a == "--valid") && i + 1 >= argc) {
      std::fprintf(stderr, "replay: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--expect") {
      have_expect = true;
      expected = read_expectations(argv[++i], ok);
      continue;
    }
    const bool valid = a == "--valid";
    const std::string dir = valid ? argv[++i] : a;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      // A folder's README is its documentation, not an input.
      if (e.is_regular_file() && e.path().extension() != ".md") inputs.push_back({e.path(), valid});
    }
  }
  std::set<std::string> seen;
  for (const Input& in : inputs) {
    std::ifstream f(in.path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    g_accepted.clear();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    const std::string name = in.path.filename().string();
    std::printf("%s: accepted by %s\n", in.path.string().c_str(), joined(g_accepted).c_str());
    if (in.must_be_valid && g_accepted.empty()) {
      std::fprintf(stderr, "replay: %s is a valid input and was refused\n", in.path.string().c_str());
      ok = false;
    }
    // A corpus seed the expectations do not list is damaged on purpose:
    // it must be refused by every parser, not merely survived.
    if (!in.must_be_valid && have_expect && !expected.count(name) && !g_accepted.empty()) {
      std::fprintf(stderr, "replay: %s is a damaged seed (not in --expect) and was accepted by %s\n",
                   in.path.string().c_str(), joined(g_accepted).c_str());
      ok = false;
    }
    if (auto it = expected.find(name); it != expected.end()) {
      seen.insert(name);
      for (const auto& parser : it->second) {
        if (g_accepted.count(parser)) continue;
        std::fprintf(stderr, "replay: %s must be accepted by %s and was not\n", in.path.string().c_str(),
                     parser.c_str());
        ok = false;
      }
    }
  }
  for (const auto& [name, parsers] : expected) {
    if (seen.count(name)) continue;
    std::fprintf(stderr, "replay: %s (expected to be accepted by %s) is not among the inputs\n", name.c_str(),
                 joined(parsers).c_str());
    ok = false;
  }
  std::printf("replayed %zu inputs, %zu with expectations\n", inputs.size(), seen.size());
  return ok && !inputs.empty() ? 0 : 1;
}
