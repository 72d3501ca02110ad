// One list of named, unit-carrying values that drives both the console table and the JSON
// (STYLE.md item 4): a result is described once, as Fields, and every reporter reads that list.
#pragma once

#include <optional>
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

/// A table whose columns are declared once and drive both the console (aligned, headers with
/// units) and the JSON (an array of {key: value} rows). A cell is a number (missing: "-" on the
/// console, omitted in JSON) or text, optionally with its own JSON value (a plan: its
/// one-line description on the console, the object in JSON).
struct Column {
  std::string key;     // JSON key, unit last: "iteration_s"
  std::string header;  // console header, unit included: "iteration s"
  int precision = 3;   // decimals of a number on the console
};

struct Cell {
  Cell(std::optional<double> n) : number(n) {}  // NOLINT: a number converts to its cell
  Cell(std::string t, nlohmann::ordered_json j = nullptr) : text(std::move(t)), json(std::move(j)) {}
  std::optional<double> number;
  std::string text;
  nlohmann::ordered_json json;  // null: the number, else the text
};

struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;  // one cell per column
};

/// Aligned columns, the first text column left-aligned, numbers right-aligned.
std::string format_console(const Table& t);
/// [{key: value, ...}, ...]: numbers as numbers, text as text, a cell's own JSON where it has one.
nlohmann::ordered_json to_json(const Table& t);

/// Aligned "label  value unit" lines under each section title.
std::string format_console(const std::vector<Section>& sections);

/// {key: value} for sections without json_key, {json_key: {key: value}} for the rest.
nlohmann::ordered_json to_json(const std::vector<Section>& sections);

/// A number with thousands separators or fixed decimals, for console output.
std::string format_number(double v, int precision);

}  // namespace foresight
