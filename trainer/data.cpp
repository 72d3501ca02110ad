#include "trainer/data.hpp"

#include <fstream>
#include <iterator>
#include <vector>

#include "core/error.hpp"
#include "trainer/params.hpp"

namespace foresight::trainer {

namespace {

std::uint64_t sample_key(std::uint64_t seed, std::int64_t step, std::int64_t index) {
  return mix64(mix64(seed ^ 0x5eed5eedULL) ^ mix64(std::uint64_t(step) * 0x100000001b3ULL + std::uint64_t(index)));
}

class SyntheticTokens final : public TokenSource {
 public:
  SyntheticTokens(int vocab, std::uint64_t seed) : vocab_(vocab), seed_(seed) {}
  void sample(std::int64_t step, std::int64_t index, std::span<std::int32_t> out) const override {
    const std::uint64_t key = sample_key(seed_, step, index);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::int32_t(mix64(key + i) % std::uint64_t(vocab_));
  }
  std::string describe() const override { return "synthetic (uniform random tokens)"; }

 private:
  int vocab_;
  std::uint64_t seed_;
};

class ByteText final : public TokenSource {
 public:
  ByteText(std::string path, std::vector<unsigned char> bytes, std::uint64_t seed)
      : path_(std::move(path)), bytes_(std::move(bytes)), seed_(seed) {}
  void sample(std::int64_t step, std::int64_t index, std::span<std::int32_t> out) const override {
    const std::uint64_t windows = bytes_.size() - out.size() + 1;
    const std::uint64_t start = sample_key(seed_, step, index) % windows;
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bytes_[start + i];
  }
  std::string describe() const override {
    return path_ + " (" + std::to_string(bytes_.size()) + " bytes, byte-level tokens)";
  }

 private:
  std::string path_;
  std::vector<unsigned char> bytes_;
  std::uint64_t seed_;
};

}  // namespace

std::unique_ptr<TokenSource> make_token_source(const std::string& data, int vocab, int seq_len, std::uint64_t seed,
                                               const std::string& plan_file) {
  if (data == "synthetic") return std::make_unique<SyntheticTokens>(vocab, seed);
  const std::string path = data == "text" ? kDefaultTextPath : data;
  const SourceLocation where{plan_file, 0, 0};
  if (vocab < 256)
    throw SpecError(where, "model.vocab", std::to_string(vocab),
                    "must be at least 256 for text data (byte-level tokens), data = " + data);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(where, "data", path, "cannot be opened for reading");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (std::int64_t(bytes.size()) < std::int64_t(seq_len) + 1)
    throw SpecError(where, "data", path,
                    "holds " + std::to_string(bytes.size()) + " bytes, fewer than model.seq_len + 1 = " +
                        std::to_string(seq_len + 1));
  return std::make_unique<ByteText>(path, std::move(bytes), seed);
}

}  // namespace foresight::trainer
