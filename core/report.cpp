#include "core/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace foresight {

std::string format_number(double v, int precision) {
  char buf[64];
  if (std::fabs(v) >= 1e15 || (v != 0 && std::fabs(v) < 1e-3))
    std::snprintf(buf, sizeof buf, "%.*e", std::max(precision, 2), v);
  else
    std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

std::string format_console(const std::vector<Section>& sections) {
  std::size_t width = 0;
  for (const auto& s : sections)
    for (const auto& f : s.fields) width = std::max(width, f.label.size());
  std::string out;
  for (const auto& s : sections) {
    if (!s.title.empty()) out += s.title + "\n";
    for (const auto& f : s.fields) {
      std::string line = "  " + f.label + std::string(width - f.label.size() + 2, ' ');
      line += format_number(f.value, f.precision);
      if (!f.unit.empty()) line += " " + f.unit;
      out += line + "\n";
    }
  }
  return out;
}

nlohmann::ordered_json to_json(const std::vector<Section>& sections) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& s : sections) {
    nlohmann::ordered_json& dst = s.json_key.empty() ? j : j[s.json_key];
    if (!s.json_key.empty() && dst.is_null()) dst = nlohmann::ordered_json::object();
    for (const auto& f : s.fields) dst[f.key] = f.value;
  }
  return j;
}

}  // namespace foresight
