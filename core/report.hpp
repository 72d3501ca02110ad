// One list of named, unit-carrying values that drives both the console table and the JSON
// (STYLE.md item 4): a result is described once, as Fields, and every reporter reads that list.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace foresight {

struct Field {
  std::string key;    // JSON key, <scope>_<stage>_<quantity> with the unit last: "iteration_s"
  double value = 0;
  std::string unit;   // printed after the value: "s", "GiB", "TFLOP/s", "" for counts
  std::string label;  // console label: "Iteration time"
  int precision = 3;  // significant decimals on the console
};

struct Section {
  std::string title;  // console heading; JSON object key when json_key is set
  std::string json_key;
  std::vector<Field> fields;
};

/// Aligned "label  value unit" lines under each section title.
std::string format_console(const std::vector<Section>& sections);

/// {key: value} for sections without json_key, {json_key: {key: value}} for the rest.
nlohmann::ordered_json to_json(const std::vector<Section>& sections);

/// A number with thousands separators or fixed decimals, for console output.
std::string format_number(double v, int precision);

}  // namespace foresight
