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

std::string format_console(const Table& t) {
  const std::size_t n = t.columns.size();
  std::vector<std::vector<std::string>> text(t.rows.size(), std::vector<std::string>(n));
  std::vector<std::size_t> width(n);
  std::vector<bool> numeric(n, true);
  for (std::size_t c = 0; c < n; ++c) width[c] = t.columns[c].header.size();
  for (std::size_t r = 0; r < t.rows.size(); ++r)
    for (std::size_t c = 0; c < n; ++c) {
      const Cell& cell = t.rows[r][c];
      if (!cell.text.empty()) numeric[c] = false;
      text[r][c] = !cell.text.empty() ? cell.text
                   : cell.number     ? format_number(*cell.number, t.columns[c].precision)
                                     : "-";
      width[c] = std::max(width[c], text[r][c].size());
    }
  auto pad = [&](const std::string& s, std::size_t c) {
    const std::string fill(width[c] - s.size(), ' ');
    return numeric[c] ? fill + s : s + fill;
  };
  std::string out;
  for (std::size_t c = 0; c < n; ++c) out += (c ? "  " : "") + pad(t.columns[c].header, c);
  out += "\n";
  for (const auto& row : text) {
    std::string line;
    for (std::size_t c = 0; c < n; ++c) line += (c ? "  " : "") + pad(row[c], c);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

nlohmann::ordered_json to_json(const Table& t) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& row : t.rows) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (std::size_t c = 0; c < t.columns.size(); ++c) {
      const Cell& cell = row[c];
      if (!cell.json.is_null()) j[t.columns[c].key] = cell.json;
      else if (!cell.text.empty()) j[t.columns[c].key] = cell.text;
      else if (cell.number) j[t.columns[c].key] = *cell.number;
    }
    rows.push_back(std::move(j));
  }
  return rows;
}

}  // namespace foresight
