#include "core/spec_fields.hpp"

namespace foresight {

std::optional<PlanViolation> complete_model(ModelSpec& m) {
  if (m.ffn_hidden == 0) {
    const long long ffn = 4LL * m.hidden;
    if (ffn > 2147483647LL)
      return PlanViolation{"model.ffn_hidden", std::to_string(ffn) + " (default: 4 * model.hidden)",
                           "must be at most 2147483647; give model.ffn_hidden explicitly"};
    m.ffn_hidden = int(ffn);
  }
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  return std::nullopt;
}

}  // namespace foresight
