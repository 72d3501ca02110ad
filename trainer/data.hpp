// Token sources. A sequence is a pure function of (step, index in the global batch), so every
// layout reads the same tokens for the same sample, and a resumed run continues exactly where an
// uninterrupted one would be, without saving reader state.
//  - synthetic: uniformly random tokens (throughput runs; nothing to learn).
//  - text: any file read as bytes (a byte-level tokenizer: vocabulary 256), windows at random
//    offsets. "text" alone names the default corpus, kDefaultTextPath.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace foresight::trainer {

/// The default real text: the Creative Commons CC0 1.0 legal code, shipped by Debian's base-files
/// package (present on every Debian system). Creative Commons dedicates the legal code of its
/// licences itself to the public domain under CC0, so it is public-domain English prose.
inline constexpr const char* kDefaultTextPath = "/usr/share/common-licenses/CC0-1.0";

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  /// Writes seq_len + 1 tokens of sample `index` of step `step` (inputs are the first seq_len,
  /// targets the last seq_len).
  virtual void sample(std::int64_t step, std::int64_t index, std::span<std::int32_t> out) const = 0;
  /// What is being read, for logs and the summary.
  virtual std::string describe() const = 0;
};

/// The source a plan's `data` field names: "synthetic", "text" (the default corpus) or a path.
/// Throws SpecError (naming `plan_file` and the field `data` or `model.vocab`) when the file is
/// unreadable, too short for one sequence, or the vocabulary cannot hold bytes.
std::unique_ptr<TokenSource> make_token_source(const std::string& data, int vocab, int seq_len, std::uint64_t seed,
                                               const std::string& plan_file);

}  // namespace foresight::trainer
