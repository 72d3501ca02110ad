#include "core/json_reader.hpp"

#include <algorithm>
#include <sstream>

#include "core/spec_json.hpp"

namespace foresight {

JsonReader::JsonReader(const nlohmann::json& j, std::string source, std::string prefix)
    : j_(j), source_(std::move(source)), prefix_(std::move(prefix)) {
  if (!j_.is_object()) fail(prefix_, brief(j_), "must be an object");
}

void JsonReader::fail(const std::string& field, const std::string& value, const std::string& rule) const {
  throw SpecError(SourceLocation{source_, 0, 0}, field, value, rule);
}

const nlohmann::json& JsonReader::get(const std::string& k, bool required) {
  if (std::find(seen_.begin(), seen_.end(), k) == seen_.end()) seen_.push_back(k);
  static const nlohmann::json null;
  if (!j_.contains(k) || j_.at(k).is_null()) {
    if (required) fail(path(k), "", "is required but missing");
    return null;
  }
  return j_.at(k);
}

namespace {

/// An integer, or a float with a whole value (whole_number, core/spec_fields.hpp).
bool json_whole_number(const nlohmann::json& v, long long& x) {
  if (v.is_number_integer()) {
    x = v.is_number_unsigned() && v.get<unsigned long long>() > 9223372036854775807ULL ? 9223372036854775807LL
                                                                                        : v.get<long long>();
    return true;
  }
  return v.is_number_float() && whole_number(v.get<double>(), x);
}

}  // namespace

int JsonReader::integer(const std::string& k, std::optional<int> fallback, long long min) {
  const auto& v = get(k, !fallback);
  if (v.is_null()) return *fallback;
  long long x = 0;
  if (!json_whole_number(v, x)) fail(path(k), brief(v), "must be an integer");
  if (v.is_number_unsigned() && v.get<unsigned long long>() > 2147483647ULL)
    fail(path(k), brief(v), "must be at most 2147483647");
  if (x < min) fail(path(k), brief(v), "must be at least " + std::to_string(min));
  if (x > 2147483647LL) fail(path(k), brief(v), "must be at most 2147483647");
  return int(x);
}

double JsonReader::number(const std::string& k, std::optional<double> fallback, double min, bool min_exclusive) {
  const auto& v = get(k, !fallback);
  if (v.is_null()) return *fallback;
  if (!v.is_number()) fail(path(k), brief(v), "must be a number");
  const double x = v.get<double>();
  std::ostringstream lim;
  lim << min;
  if (min_exclusive ? !(x > min) : !(x >= min))
    fail(path(k), brief(v), std::string(min_exclusive ? "must be greater than " : "must be at least ") + lim.str());
  return x;
}

bool JsonReader::boolean(const std::string& k, std::optional<bool> fallback) {
  const auto& v = get(k, !fallback);
  if (v.is_null()) return *fallback;
  if (!v.is_boolean()) fail(path(k), brief(v), "must be true or false");
  return v.get<bool>();
}

std::string JsonReader::string(const std::string& k, std::optional<std::string> fallback) {
  const auto& v = get(k, !fallback);
  if (v.is_null()) return *fallback;
  if (!v.is_string()) fail(path(k), brief(v), "must be a string");
  return v.get<std::string>();
}

std::vector<int> JsonReader::int_list(const std::string& k, long long min) {
  const auto& v = get(k, false);
  std::vector<int> out;
  if (v.is_null()) return out;
  if (!v.is_array()) fail(path(k), brief(v), "must be a list of integers");
  if (v.size() > 1000000) fail(path(k), std::to_string(v.size()) + " entries", "must have at most 1000000 entries");
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto& e = v[i];
    const std::string p = path(k) + "[" + std::to_string(i) + "]";
    long long x = 0;
    if (!json_whole_number(e, x)) fail(p, brief(e), "must be an integer");
    if (e.is_number_unsigned() && e.get<unsigned long long>() > 2147483647ULL) fail(p, brief(e), "must be at most 2147483647");
    if (x < min) fail(p, brief(e), "must be at least " + std::to_string(min));
    if (x > 2147483647LL) fail(p, brief(e), "must be at most 2147483647");
    out.push_back(int(x));
  }
  return out;
}

void JsonReader::finish() const {
  for (auto it = j_.begin(); it != j_.end(); ++it)
    if (std::find(seen_.begin(), seen_.end(), it.key()) == seen_.end()) fail(path(it.key()), "", "is not a known key");
}

std::string JsonFieldReader::format(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace foresight
