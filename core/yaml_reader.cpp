#include "core/yaml_reader.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

namespace foresight {

SourceLocation location_of(const YAML::Node& node, const std::string& file) {
  const YAML::Mark m = node.Mark();
  if (m.is_null() || m.line < 0) return SourceLocation{file, 0, 0};
  return SourceLocation{file, m.line + 1, m.column + 1};
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SpecError(SourceLocation{path, 0, 0}, "", "", "cannot be opened for reading");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

YAML::Node parse_yaml(const std::string& text, const std::string& path) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    const int col = e.mark.is_null() ? 0 : e.mark.column + 1;
    throw SpecError(SourceLocation{path, line, col}, "", "", "is not valid YAML: " + e.msg);
  }
}

YAML::Node parse_yaml_file(const std::string& path) { return parse_yaml(read_text_file(path), path); }

// yaml-cpp's default Node() is a defined null, so "absent" means undefined or null.
static bool missing(const YAML::Node& n) { return !n.IsDefined() || n.IsNull(); }

static std::string describe(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsSequence()) return "[a list]";
  if (n.IsMap()) return "{a mapping}";
  return "null";
}

MapReader::MapReader(const YAML::Node& node, std::string file, std::string prefix)
    : node_(node), file_(std::move(file)), prefix_(std::move(prefix)) {
  if (!node_.IsMap())
    throw SpecError(location_of(node_, file_), prefix_, describe(node_), "must be a mapping of keys to values");
}

bool MapReader::has(const std::string& key) const {
  known_.insert(key);
  const YAML::Node& cn = node_;
  return !missing(cn[key]);
}

std::string MapReader::path(const std::string& key) const {
  return prefix_.empty() ? key : prefix_ + "." + key;
}

SourceLocation MapReader::where(const std::string& key) const {
  for (auto it = node_.begin(); it != node_.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return location_of(it->second, file_);
  return location_of(node_, file_);
}

YAML::Node MapReader::child(const std::string& key, bool required) {
  known_.insert(key);
  const YAML::Node& cn = node_;
  YAML::Node n = cn[key];
  if (missing(n)) {
    if (required) throw SpecError(location_of(node_, file_), path(key), "", "is required but missing");
    return YAML::Node();
  }
  return n;
}

YAML::Node MapReader::scalar(const std::string& key, bool required) {
  YAML::Node n = child(key, required);
  if (!missing(n) && !n.IsScalar())
    throw SpecError(where(key), path(key), describe(n), "must be a single value, not a list or mapping");
  return n;
}

namespace {

/// An integer written as digits, or as a number with an exponent or a fraction whose value is whole
/// (whole_number, core/spec_fields.hpp); false for anything else ("8.5", "thirty-five", "0x10",
/// "inf").
bool parse_whole_number(const std::string& s, long long& v) {
  if (s.find_first_of("xX") != std::string::npos) return false;  // std::stod would read hex floats
  std::size_t used = 0;
  try {
    v = std::stoll(s, &used);
    if (used == s.size() && used > 0) return true;
  } catch (const std::exception&) {
  }
  double d = 0;
  try {
    d = std::stod(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size() && whole_number(d, v);
}

}  // namespace

int MapReader::get_int(const std::string& key, std::optional<int> fallback, long long min_value) {
  YAML::Node n = scalar(key, !fallback.has_value());
  if (missing(n)) return *fallback;
  const std::string& s = n.Scalar();
  long long v = 0;
  if (!parse_whole_number(s, v)) throw SpecError(where(key), path(key), s, "must be an integer");
  if (v < min_value)
    throw SpecError(where(key), path(key), s, "must be at least " + std::to_string(min_value));
  if (v > 2147483647LL) throw SpecError(where(key), path(key), s, "must be at most 2147483647");
  return static_cast<int>(v);
}

double MapReader::get_double(const std::string& key, std::optional<double> fallback, double min_value,
                             bool min_exclusive) {
  YAML::Node n = scalar(key, !fallback.has_value());
  if (missing(n)) return *fallback;
  const std::string& s = n.Scalar();
  double v = 0;
  std::size_t used = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v))
    throw SpecError(where(key), path(key), s, "must be a finite number");
  std::ostringstream lim;
  lim << min_value;
  if (min_exclusive ? !(v > min_value) : !(v >= min_value))
    throw SpecError(where(key), path(key), s,
                    std::string(min_exclusive ? "must be greater than " : "must be at least ") + lim.str());
  return v;
}

bool MapReader::get_bool(const std::string& key, std::optional<bool> fallback) {
  YAML::Node n = scalar(key, !fallback.has_value());
  if (missing(n)) return *fallback;
  const std::string& s = n.Scalar();
  if (s == "true") return true;
  if (s == "false") return false;
  throw SpecError(where(key), path(key), s, "must be true or false");
}

std::string MapReader::get_string(const std::string& key, std::optional<std::string> fallback) {
  YAML::Node n = scalar(key, !fallback.has_value());
  if (missing(n)) return *fallback;
  return n.Scalar();
}

std::vector<int> MapReader::get_int_list(const std::string& key, long long min_value) {
  YAML::Node n = child(key, false);
  std::vector<int> out;
  if (missing(n)) return out;
  if (!n.IsSequence()) throw SpecError(where(key), path(key), describe(n), "must be a list of integers");
  if (n.size() > 1000000)
    throw SpecError(where(key), path(key), std::to_string(n.size()) + " entries", "must have at most 1000000 entries");
  for (std::size_t i = 0; i < n.size(); ++i) {
    const YAML::Node e = n[i];
    const std::string p = path(key) + "[" + std::to_string(i) + "]";
    if (!e.IsScalar()) throw SpecError(location_of(e, file_), p, describe(e), "must be an integer");
    long long v = 0;
    if (!parse_whole_number(e.Scalar(), v)) throw SpecError(location_of(e, file_), p, e.Scalar(), "must be an integer");
    if (v < min_value)
      throw SpecError(location_of(e, file_), p, e.Scalar(), "must be at least " + std::to_string(min_value));
    if (v > 2147483647LL) throw SpecError(location_of(e, file_), p, e.Scalar(), "must be at most 2147483647");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

void MapReader::finish() const {
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string k = it->first.IsScalar() ? it->first.Scalar() : "<non-scalar key>";
    if (known_.count(k)) continue;
    std::string allowed;
    for (const auto& a : known_) allowed += (allowed.empty() ? "" : ", ") + a;
    throw SpecError(location_of(it->first, file_), path(k), "", "is not a known key here (known: " + allowed + ")");
  }
}

}  // namespace foresight
