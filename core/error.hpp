// The two error channels (STYLE.md item 6). SpecError: the user's input or plan is wrong; it carries
// where (file, line, column), which field, the offending value and the rule it broke, and `main`
// turns it into exit code 2. FORESIGHT_CHECK: an internal invariant; failing it is a bug in Foresight.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace foresight {

/// Where a value came from: a file and a 1-based line and column (0 when unknown).
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;
  std::string to_string() const;
};

/// A user error: bad scenario file, impossible plan, unknown name. Exit code 2 at the CLI.
class SpecError : public std::runtime_error {
 public:
  SpecError(SourceLocation where, std::string field, std::string value, std::string rule);
  const SourceLocation& where() const { return where_; }
  const std::string& field() const { return field_; }
  const std::string& value() const { return value_; }
  const std::string& rule() const { return rule_; }

 private:
  SourceLocation where_;
  std::string field_, value_, rule_;
};

/// An internal invariant was violated: a bug, not a user mistake.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
/// Collects `<<` context after a failed check, then throws InternalError when destroyed.
class CheckFailure {
 public:
  CheckFailure(const char* cond, const char* file, int line);
  [[noreturn]] ~CheckFailure() noexcept(false);
  template <class T>
  CheckFailure& operator<<(const T& x) {
    os_ << x;
    return *this;
  }

 private:
  std::ostringstream os_;
};
}  // namespace detail

}  // namespace foresight

/// FORESIGHT_CHECK(cond) << "context": throws InternalError naming the condition when it is false.
/// Never for user input (that is SpecError); stays on under NDEBUG.
#define FORESIGHT_CHECK(cond) \
  if (cond) {                 \
  } else                      \
    ::foresight::detail::CheckFailure(#cond, __FILE__, __LINE__)
