// What check_plan and a framework's refusal report when a plan cannot run: the offending field,
// its value and the rule it broke (the CLI prints them and exits 2).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace foresight {

/// A rule a plan broke: the field (dotted path, e.g. "plan.pp"), its value and the rule, in words.
struct PlanViolation {
  std::string field;
  std::string value;
  std::string rule;
};

/// A number as a violation prints it: "0.5", "1", "0.125" (no trailing zeros).
inline std::string value_text(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

/// The violation of `rule` by `field` = `value`, as check_plan and FrameworkTraits::refusal return it.
inline std::optional<PlanViolation> violation(std::string field, std::string value, std::string rule) {
  return PlanViolation{std::move(field), std::move(value), std::move(rule)};
}

/// "[n entries]", a list field's value in a violation (appended piecewise: g++ 12's -Wrestrict
/// misfires on "[" + std::string + "...").
inline std::string entries(std::size_t n, const char* what) {
  std::string s = "[";
  s += std::to_string(n);
  s += ' ';
  s += what;
  s += ']';
  return s;
}

}  // namespace foresight
