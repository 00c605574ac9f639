#include "strict_yaml.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml-cpp/eventhandler.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

namespace sim_vendor::yaml {
namespace {

constexpr uint64_t kMaxFile = uint64_t{1} << 20;

// The deepest bracket nesting and indentation of `text`: yaml-cpp recurses
// once per level, so absurd ones are refused before it reads them.
void refuse_deep_nesting(const std::string& text, const std::string& file) {
  int depth = 0;
  size_t indent = 0;
  bool line_start = true;
  for (char c : text) {
    depth += (c == '[' || c == '{') - (c == ']' || c == '}');
    if (depth > 32) throw Refused{file + ":0: (top): nesting deeper than 32 levels"};
    if (c == '\n') {
      line_start = true;
      indent = 0;
    } else if (line_start && (c == ' ' || c == '-')) {
      if (++indent > 256) throw Refused{file + ":0: (top): indentation deeper than 256 columns"};
    } else {
      line_start = false;
    }
  }
}

// Where a document starts and where its first node does.
struct FirstNode final : YAML::EventHandler {
  YAML::Mark start = YAML::Mark::null_mark(), node = YAML::Mark::null_mark();
  void OnDocumentStart(const YAML::Mark& m) override { start = m; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { seen(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { seen(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override {
    seen(m);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    seen(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    seen(m);
  }
  void OnMapEnd() override {}
  void seen(const YAML::Mark& m) {
    if (node.is_null()) node = m;
  }
};

// YAML::Load keeps the first document and drops the rest unseen; LoadAll
// never returns on some malformed text (the same empty document at the
// same place forever). So two documents at most are read here.
void refuse_second_document(const std::string& text, const std::string& file) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  FirstNode first, second;
  if (!parser.HandleNextDocument(first) || !parser.HandleNextDocument(second)) return;
  const YAML::Mark at = second.node.is_null() ? second.start : second.node;
  const std::string where = file + ":" + std::to_string(at.line + 1);
  if (second.start.pos == first.start.pos)
    throw Refused{where +
                  ": (syntax): the text cannot be read as YAML from here (the parser makes no progress)"};
  throw Refused{where +
                ": (top): a second YAML document starts here; a file holds one (the rest would be silently "
                "ignored)"};
}

}  // namespace

void Reader::fail(const YAML::Node& at, const std::string& key, const std::string& why) const {
  const int line = at.IsDefined() && at.Mark().line >= 0 ? at.Mark().line + 1 : 0;
  throw Refused{file_ + ":" + std::to_string(line) + ": " + key + ": " + why};
}

void Reader::only_keys(const YAML::Node& map, const std::string& path,
                       std::initializer_list<const char*> allowed) const {
  if (!map.IsMap()) fail(map, path.empty() ? "(top)" : path, "expected a mapping of keys to values");
  std::set<std::string> seen;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) fail(kv.first, path, "keys must be plain names");
    const std::string k = kv.first.Scalar(), at = path.empty() ? k : path + "." + k;
    if (!seen.insert(k).second)
      fail(kv.first, at, "given twice (one value would silently replace the other)");
    std::string list;
    bool known = false;
    for (const char* a : allowed) {
      known = known || k == a;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    if (!known) fail(kv.first, at, "unknown key (allowed here: " + list + ")");
  }
}

double Reader::number(const YAML::Node& n, const std::string& key, double lo, double hi) const {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v))
    fail(n, key, n.IsScalar() ? "expected a number, found '" + n.Scalar() + "'" : "expected a number");
  if (!std::isfinite(v)) fail(n, key, "must be a finite number");
  if (v < lo) fail(n, key, std::to_string(v) + " is below the minimum " + std::to_string(lo));
  if (v > hi) fail(n, key, std::to_string(v) + " is above the maximum " + std::to_string(hi));
  return v;
}

uint64_t Reader::integer(const YAML::Node& n, const std::string& key, uint64_t lo, uint64_t hi) const {
  if (!n.IsScalar()) fail(n, key, "expected a whole number");
  const std::string& s = n.Scalar();
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    fail(n, key, "expected a whole number >= 0, found '" + s + "'");
  if (s.size() > 19) fail(n, key, "'" + s + "' is too large");
  const uint64_t v = std::stoull(s);
  if (v < lo || v > hi) fail(n, key, s + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

std::string Reader::text(const YAML::Node& n, const std::string& key) const {
  if (!n.IsScalar()) fail(n, key, "expected a string");
  return n.Scalar();
}

YAML::Node parse(const std::string& text, const std::string& file) {
  refuse_deep_nesting(text, file);
  try {
    refuse_second_document(text, file);
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Refused{file + ":" + std::to_string(e.mark.line + 1) + ": (syntax): " + e.msg};
  }
}

std::string read_file(const std::string& path) {
  const auto refuse = [&](const std::string& why) { return Refused{path + ":0: (file): " + why}; };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw refuse(std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat st {};
  std::string text, why;
  if (::fstat(fd, &st) != 0)
    why = std::string("cannot stat (") + std::strerror(errno) + ")";
  else if (!S_ISREG(st.st_mode))
    why = std::string("not a regular file (") +
          (S_ISFIFO(st.st_mode)                         ? "a FIFO"
           : S_ISDIR(st.st_mode)                        ? "a folder"
           : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
           : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                        : "not a file") +
          ")";
  char buf[65536];
  while (why.empty()) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      why = std::string("read failed (") + std::strerror(errno) + ")";
    else if (text.size() + static_cast<uint64_t>(n) > kMaxFile)
      why = "larger than " + std::to_string(kMaxFile) + " bytes";
    else
      text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!why.empty()) throw refuse(why);
  return text;
}

}  // namespace sim_vendor::yaml
