// Reads one YAML mapping field by field with types, ranges and locations, and rejects keys nobody
// asked for. Every value parsed from a scenario file passes through here, so every bad value gets
// the same kind of message: file:line:col, the dotted field name, the value, the rule.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/enums.hpp"
#include "core/error.hpp"
#include "core/spec_fields.hpp"

namespace foresight {

/// Location of a node (yaml-cpp marks are 0-based; ours are 1-based).
SourceLocation location_of(const YAML::Node& node, const std::string& file);

/// A file's whole text; a SpecError naming the file when it cannot be read.
std::string read_text_file(const std::string& path);
/// Parses YAML text that `path` names, turning yaml-cpp's exceptions into SpecErrors with a location.
YAML::Node parse_yaml(const std::string& text, const std::string& path);
YAML::Node parse_yaml_file(const std::string& path);

class MapReader {
 public:
  /// `node` must be a mapping; `prefix` is its dotted path ("plan", "cluster.inter_node").
  MapReader(const YAML::Node& node, std::string file, std::string prefix);

  bool has(const std::string& key) const;
  const YAML::Node& node() const { return node_; }
  const std::string& file() const { return file_; }
  std::string path(const std::string& key) const;
  SourceLocation where(const std::string& key) const;

  /// The raw child (marks the key as known). Throws when required and missing.
  YAML::Node child(const std::string& key, bool required);

  int get_int(const std::string& key, std::optional<int> fallback, long long min_value);
  double get_double(const std::string& key, std::optional<double> fallback, double min_value,
                    bool min_exclusive = false);
  bool get_bool(const std::string& key, std::optional<bool> fallback);
  std::string get_string(const std::string& key, std::optional<std::string> fallback);
  std::vector<int> get_int_list(const std::string& key, long long min_value);

  template <class E>
  E get_enum(const std::string& key, std::optional<E> fallback) {
    std::optional<std::string> fb;
    if (fallback) fb = to_string(*fallback);
    std::string s = get_string(key, fb);
    if (auto e = parse_enum<E>(s)) return *e;
    throw SpecError(where(key), path(key), s, "must be one of: " + allowed_values<E>());
  }

  /// Throws on any key that was never asked for, listing the keys this mapping knows.
  void finish() const;

 private:
  YAML::Node scalar(const std::string& key, bool required);
  YAML::Node node_;
  std::string file_, prefix_;
  mutable std::set<std::string> known_;
};

/// Fills a spec from a YAML mapping through its field table (core/spec_fields.hpp visit_fields),
/// recording where each field present was read when `locations` is given ("plan.pp" -> file:line).
class YamlFieldReader : public SectionReading<YamlFieldReader> {
 public:
  YamlFieldReader(MapReader& r, std::map<std::string, SourceLocation>* locations = nullptr) : r_(r), loc_(locations) {}
  void integer(const char* k, int& f, std::optional<int> fallback, long long min) {
    note(k);
    f = r_.get_int(k, fallback, min);
  }
  void positive(const char* k, double& f, std::optional<double> fallback) {
    note(k);
    f = r_.get_double(k, fallback, 0.0, true);
  }
  void fraction(const char* k, double& f, std::optional<double> fallback) {
    note(k);
    f = r_.get_double(k, fallback, 0.0);
    if (f > 1.0) throw SpecError(r_.where(k), r_.path(k), r_.node()[k].Scalar(), "must lie in [0, 1]");
  }
  void boolean(const char* k, bool& f, std::optional<bool> fallback) {
    note(k);
    f = r_.get_bool(k, fallback);
  }
  void optional_boolean(const char* k, std::optional<bool>& f) {
    note(k);
    if (r_.has(k)) f = r_.get_bool(k, std::nullopt);
  }
  void text(const char* k, std::string& f, std::optional<std::string> fallback) {
    note(k);
    f = r_.get_string(k, fallback);
  }
  template <class E>
  void enumeration(const char* k, E& f, std::optional<std::type_identity_t<E>> fallback) {
    note(k);
    f = r_.get_enum<E>(k, fallback);
  }
  template <class E>
  void optional_enumeration(const char* k, std::optional<E>& f) {
    note(k);
    if (r_.has(k)) f = r_.get_enum<E>(k, std::nullopt);
  }
  void int_list(const char* k, std::vector<int>& f, long long min) {
    note(k);
    f = r_.get_int_list(k, min);
  }
  bool present(const char* k) { return r_.has(k); }
  template <class F>
  void nested(const char* k, F&& read) {
    note(k);
    if (!r_.has(k)) return;
    MapReader sub(r_.child(k, true), r_.file(), r_.path(k));
    YamlFieldReader v(sub, loc_);
    read(v);
    sub.finish();
  }

 private:
  void note(const char* k) {
    if (loc_ && r_.has(k)) (*loc_)[r_.path(k)] = r_.where(k);
  }
  MapReader& r_;
  std::map<std::string, SourceLocation>* loc_;
};

}  // namespace foresight
