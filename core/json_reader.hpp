// Reads one JSON object field by field with types and ranges, and rejects keys nobody asked for:
// the JSON twin of core/yaml_reader.hpp's MapReader, so that every bad value in plan.json (or any
// JSON input) gets the same message: source, dotted field, value, rule (a SpecError). JsonFieldReader
// walks a spec's field table (core/spec_fields.hpp) with it.
#pragma once

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enums.hpp"
#include "core/error.hpp"
#include "core/spec_fields.hpp"

namespace foresight {

class JsonReader {
 public:
  /// `j` must be an object; `prefix` is its dotted path ("plan", "model.moe"); `source` names the
  /// file in errors.
  JsonReader(const nlohmann::json& j, std::string source, std::string prefix);

  [[noreturn]] void fail(const std::string& field, const std::string& value, const std::string& rule) const;
  std::string path(const std::string& k) const { return prefix_.empty() ? k : prefix_ + "." + k; }
  const std::string& source() const { return source_; }
  /// The raw value (marks the key as known); a null json when absent and not required.
  const nlohmann::json& get(const std::string& k, bool required);
  bool has(const std::string& k) { return !get(k, false).is_null(); }

  int integer(const std::string& k, std::optional<int> fallback, long long min);
  double number(const std::string& k, std::optional<double> fallback, double min, bool min_exclusive = false);
  bool boolean(const std::string& k, std::optional<bool> fallback);
  std::string string(const std::string& k, std::optional<std::string> fallback);
  std::vector<int> int_list(const std::string& k, long long min);
  template <class E>
  E enumeration(const std::string& k, std::optional<E> fallback) {
    std::optional<std::string> fb;
    if (fallback) fb = to_string(*fallback);
    const std::string s = string(k, fb);
    if (auto e = parse_enum<E>(s)) return *e;
    fail(path(k), s, "must be one of: " + allowed_values<E>());
  }
  /// Throws on any key that was never asked for.
  void finish() const;

 private:
  const nlohmann::json& j_;
  std::string source_, prefix_;
  std::vector<std::string> seen_;
};

/// Fills a spec from a JSON object through its field table (visit_fields).
class JsonFieldReader : public SectionReading<JsonFieldReader> {
 public:
  explicit JsonFieldReader(JsonReader& r) : r_(r) {}
  void integer(const char* k, int& f, std::optional<int> fallback, long long min) { f = r_.integer(k, fallback, min); }
  void positive(const char* k, double& f, std::optional<double> fallback) { f = r_.number(k, fallback, 0.0, true); }
  void fraction(const char* k, double& f, std::optional<double> fallback) {
    f = r_.number(k, fallback, 0.0);
    if (f > 1.0) r_.fail(r_.path(k), format(f), "must lie in [0, 1]");
  }
  void boolean(const char* k, bool& f, std::optional<bool> fallback) { f = r_.boolean(k, fallback); }
  void optional_boolean(const char* k, std::optional<bool>& f) {
    if (r_.has(k)) f = r_.boolean(k, std::nullopt);
  }
  void text(const char* k, std::string& f, std::optional<std::string> fallback) { f = r_.string(k, fallback); }
  template <class E>
  void enumeration(const char* k, E& f, std::optional<std::type_identity_t<E>> fallback) { f = r_.enumeration<E>(k, fallback); }
  template <class E>
  void optional_enumeration(const char* k, std::optional<E>& f) {
    if (r_.has(k)) f = r_.enumeration<E>(k, std::nullopt);
  }
  void int_list(const char* k, std::vector<int>& f, long long min) { f = r_.int_list(k, min); }
  bool present(const char* k) { return r_.has(k); }
  template <class F>
  void nested(const char* k, F&& read) {
    if (!r_.has(k)) return;
    JsonReader sub(r_.get(k, true), r_.source(), r_.path(k));
    JsonFieldReader v(sub);
    read(v);
    sub.finish();
  }

 private:
  static std::string format(double v);
  JsonReader& r_;
};

/// Writes a spec's fields into a JSON object through its field table.
class JsonFieldWriter {
 public:
  explicit JsonFieldWriter(nlohmann::ordered_json& j) : j_(j) {}
  template <class T, class F>
  void integer(const char* k, const T& f, F&&, long long) { j_[k] = f; }
  template <class T, class F>
  void positive(const char* k, const T& f, F&&) { j_[k] = f; }
  template <class T, class F>
  void fraction(const char* k, const T& f, F&&) { j_[k] = f; }
  template <class T, class F>
  void boolean(const char* k, const T& f, F&&) { j_[k] = f; }
  void optional_boolean(const char* k, const std::optional<bool>& f) {
    if (f) j_[k] = *f;
  }
  template <class T, class F>
  void text(const char* k, const T& f, F&&) { j_[k] = f; }
  template <class E, class F>
  void enumeration(const char* k, const E& f, F&&) { j_[k] = to_string(f); }
  template <class E>
  void optional_enumeration(const char* k, const std::optional<E>& f) {
    if (f) j_[k] = to_string(*f);
  }
  template <class T>
  void int_list(const char* k, const T& f, long long) { j_[k] = f; }
  template <class S>
  void section(const char* k, const S& s) {
    nlohmann::ordered_json sub = nlohmann::ordered_json::object();
    JsonFieldWriter v(sub);
    visit_fields(v, s);
    j_[k] = sub;
  }
  template <class S>
  void optional_section(const char* k, const std::optional<S>& s) {
    if (s) section(k, *s);
  }

 private:
  nlohmann::ordered_json& j_;
};

}  // namespace foresight
