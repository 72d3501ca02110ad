// What check_plan and a framework's refusal report when a plan cannot run: the offending field,
// its value and the rule it broke (the CLI prints them and exits 2).
#pragma once

#include <string>

namespace foresight {

/// A rule a plan broke: the field (dotted path, e.g. "plan.pp"), its value and the rule, in words.
struct PlanViolation {
  std::string field;
  std::string value;
  std::string rule;
};

}  // namespace foresight
