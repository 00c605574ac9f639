#include "yaml_reader.hpp"

#include "regular_file.hpp"

#include <yaml-cpp/eventhandler.h>

#include <cmath>
#include <set>
#include <sstream>
#include <vector>

namespace sigma::yaml {
namespace {

// yaml-cpp recurses once per nesting level: refuse absurd nesting first.
bool nesting_ok(const std::string& text, std::string& why) {
  int depth = 0;
  for (char c : text) {
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') --depth;
    if (depth > 32) {
      why = "nesting deeper than 32 levels";
      return false;
    }
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t indent = 0;
    while (pos + indent < text.size() && (text[pos + indent] == ' ' || text[pos + indent] == '-')) ++indent;
    if (indent > 256) {
      why = "indentation deeper than 256 columns";
      return false;
    }
    pos = text.find('\n', pos);
    if (pos == std::string::npos) break;
    ++pos;
  }
  return true;
}

// Where a document starts, and where its first node does (the line a
// person reads as the document's); every other event is ignored.
struct DocumentStart final : YAML::EventHandler {
  YAML::Mark start = YAML::Mark::null_mark();
  YAML::Mark content = YAML::Mark::null_mark();
  void OnDocumentStart(const YAML::Mark& m) override { start = m; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { node(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { node(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override {
    node(m);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    node(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    node(m);
  }
  void OnMapEnd() override {}
  void node(const YAML::Mark& m) {
    if (content.is_null()) content = m;
  }
  int line() const { return (content.is_null() ? start : content).line + 1; }
};

// A file holds one document. yaml-cpp's Load keeps the first and drops the
// rest unseen, and its LoadAll never returns on some malformed text (the
// parser then yields the same empty document at the same place forever), so
// at most two documents are read here and a second one at the first one's
// place is that failure.
void refuse_a_second_document(const std::string& text, const std::string& file) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStart first, second;
  if (!parser.HandleNextDocument(first) || !parser.HandleNextDocument(second)) return;
  const std::string at = file + ":" + std::to_string(second.line());
  if (second.start.pos == first.start.pos)
    throw Refused{at +
                  ": (syntax): the text cannot be read as YAML from here (the parser makes no progress)"};
  throw Refused{at +
                ": (top): a second YAML document starts here; a file holds one (the rest would be "
                "silently ignored)"};
}

}  // namespace

void Reader::fail(const YAML::Node& at, const std::string& key, const std::string& why) const {
  const int line = at.IsDefined() && at.Mark().line >= 0 ? at.Mark().line + 1 : 0;
  throw Refused{file_ + ":" + std::to_string(line) + ": " + key + ": " + why};
}

void Reader::only_keys(const YAML::Node& map, const std::string& path,
                       std::initializer_list<const char*> allowed) const {
  if (!map.IsMap()) fail(map, path.empty() ? "(top)" : path, "expected a mapping of keys to values");
  std::set<std::string> ok(allowed.begin(), allowed.end()), seen;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) fail(kv.first, path, "keys must be plain names");
    const std::string k = kv.first.Scalar();
    if (!seen.insert(k).second)
      fail(kv.first, path.empty() ? k : path + "." + k,
           "given twice (one value would silently replace the other)");
    if (!ok.count(k)) {
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      fail(kv.first, path.empty() ? k : path + "." + k, "unknown key (allowed here: " + list + ")");
    }
  }
}

double Reader::number(const YAML::Node& n, const std::string& key, double lo, double hi) const {
  if (!n.IsScalar()) fail(n, key, "expected a number");
  double v = 0;
  try {
    v = n.as<double>();
  } catch (const YAML::Exception&) {
    fail(n, key, "expected a number, found '" + n.Scalar() + "'");
  }
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

bool Reader::boolean(const YAML::Node& n, const std::string& key) const {
  if (!n.IsScalar()) fail(n, key, "expected true or false");
  try {
    return n.as<bool>();
  } catch (const YAML::Exception&) {
    fail(n, key, "expected true or false, found '" + n.Scalar() + "'");
  }
}

YAML::Node parse(const std::string& text, const std::string& file) {
  std::string why;
  if (!nesting_ok(text, why)) throw Refused{file + ":0: (top): " + why};
  try {
    refuse_a_second_document(text, file);
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Refused{file + ":" + std::to_string(e.mark.line + 1) + ": (syntax): " + e.msg};
  }
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  std::string text, why;
  if (!files::read_regular(path, max_bytes, text, why)) throw Refused{path + ":0: (file): " + why};
  return text;
}

}  // namespace sigma::yaml
