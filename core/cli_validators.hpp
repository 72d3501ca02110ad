// Command-line validators whose messages name the rule and the value. CLI11's PositiveNumber and
// NonNegativeNumber print their bound as the largest double ("not in range 0.000000 to 1797..."),
// and an option without a check takes -1 steps or a NaN learning rate without a word. Header-only:
// only targets that link CLI11 (foresight's commands, foresight-train) include it.
#pragma once

#include <CLI/CLI.hpp>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>

namespace foresight::cli {

/// A whole number from `lo` to INT_MAX (so it fits the int it is read into).
inline CLI::Validator whole_at_least(int lo) {
  const std::string rule = "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(INT_MAX);
  return CLI::Validator(
      [rule, lo](std::string& s) -> std::string {
        long long v = 0;
        if (!CLI::detail::lexical_cast(s, v) || v < lo || v > INT_MAX) return rule + " (got '" + s + "')";
        return {};
      },
      "INT>=" + std::to_string(lo));
}

/// A whole number from 0 to 2^64 - 1, written without a sign (a seed).
inline CLI::Validator unsigned_whole() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        unsigned long long v = 0;
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || !CLI::detail::lexical_cast(s, v))
          return "must be a whole number from 0 to 18446744073709551615 (got '" + s + "')";
        return {};
      },
      "UINT");
}

/// A finite number at least `lo`, or above it when `exclusive` (`what` says what it measures).
inline CLI::Validator number_at_least(double lo, bool exclusive, const std::string& what) {
  char bound[32];
  std::snprintf(bound, sizeof bound, "%g", lo);
  const std::string rule = std::string("must be a finite number ") + (exclusive ? "above " : "of at least ") + bound +
                           (what.empty() ? "" : " (" + what + ")");
  return CLI::Validator(
      [rule, lo, exclusive](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || !std::isfinite(v) || v < lo || (exclusive && v == lo))
          return rule + "; got '" + s + "'";
        return {};
      },
      std::string("FLOAT") + (exclusive ? ">" : ">=") + bound);
}

}  // namespace foresight::cli
