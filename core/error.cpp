#include "core/error.hpp"

namespace foresight {

std::string SourceLocation::to_string() const {
  std::ostringstream s;
  s << (file.empty() ? "<input>" : file);
  if (line > 0) {
    s << ':' << line;
    if (column > 0) s << ':' << column;
  }
  return s.str();
}

static std::string format_spec_error(const SourceLocation& where, const std::string& field,
                                     const std::string& value, const std::string& rule) {
  std::ostringstream msg;
  msg << where.to_string() << ": ";
  if (!field.empty()) {
    msg << field;
    if (!value.empty()) msg << " = " << value;
    msg << ": ";
  }
  msg << rule;
  return msg.str();
}

SpecError::SpecError(SourceLocation where, std::string field, std::string value, std::string rule)
    : std::runtime_error(format_spec_error(where, field, value, rule)),
      where_(std::move(where)),
      field_(std::move(field)),
      value_(std::move(value)),
      rule_(std::move(rule)) {}

namespace detail {
CheckFailure::CheckFailure(const char* cond, const char* file, int line) {
  os_ << "internal check failed: " << cond << " at " << file << ":" << line << ": ";
}
CheckFailure::~CheckFailure() noexcept(false) { throw InternalError(os_.str()); }
}  // namespace detail

}  // namespace foresight
