#include "trainer/checkpoint.hpp"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.hpp"

namespace foresight::trainer {

namespace {

// Format 2 added params_hash (format 1 could not tell an interleaved layout or another expert
// placement from a plain one with as many elements).
constexpr std::array<char, 8> kMagic = {'F', 'S', 'T', 'R', 'A', 'I', 'N', '2'};
constexpr std::array<char, 8> kMagicV1 = {'F', 'S', 'T', 'R', 'A', 'I', 'N', '1'};

/// The fixed-size header, every field an int64 so the file has no padding or endianness games
/// beyond the host's (checkpoints are not meant to move between architectures).
struct Header {
  std::int64_t step, seed, tp, pp, dp, tp_rank, pp_rank, dp_rank;
  std::int64_t layers, hidden, heads, seq_len, vocab, ffn_hidden, elements;
  std::int64_t state_first, state_elements;  // the optimizer shard (ZeRO-1), or 0 and elements
  std::int64_t params_hash;                  // of this rank's parameter names and shapes, in order
};

/// A hash of the names and shapes of the store's parameters in declaration order: which layers,
/// model chunks (interleaved) and experts this rank holds.
std::int64_t params_hash(const ParamStore& s) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL;
  auto add = [&](std::uint64_t v) { h = mix64(h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2))); };
  for (int i = 0; i < s.size(); ++i) {
    for (char c : s[i].decl.name) add(std::uint64_t(static_cast<unsigned char>(c)));
    add(std::uint64_t(s[i].decl.rows));
    add(std::uint64_t(s[i].decl.cols));
  }
  return std::int64_t(h & 0x7fffffffffffffffULL);
}

std::string step_dir(const std::string& dir, int step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%06d", step);
  return (std::filesystem::path(dir) / name).string();
}

std::string rank_file(const std::string& dir, int step, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.bin", rank);
  return (std::filesystem::path(step_dir(dir, step)) / name).string();
}

Header make_header(int step, const RankLayout& l, const ModelSpec& m, std::uint64_t seed, const ParamStore& s) {
  return Header{step, std::int64_t(seed), l.tp, l.pp, l.dp, l.tp_rank, l.pp_rank, l.dp_rank,
                m.layers, m.hidden, m.heads, m.seq_len, m.vocab, m.ffn_hidden, s.elements(),
                s.state_first(), s.first_moments().numel(), params_hash(s)};
}

}  // namespace

void save_checkpoint(const std::string& dir, int step, const RankLayout& layout, const ModelSpec& model,
                     std::uint64_t seed, const ParamStore& store, Backend& be) {
  std::error_code ec;
  std::filesystem::create_directories(step_dir(dir, step), ec);
  if (ec) throw SpecError(SourceLocation{step_dir(dir, step), 0, 0}, "checkpoint_dir", dir, "cannot be created: " + ec.message());
  const std::string file = rank_file(dir, step, layout.rank);
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw SpecError(SourceLocation{tmp, 0, 0}, "checkpoint_dir", dir, "cannot be written");
    const Header h = make_header(step, layout, model, seed, store);
    out.write(kMagic.data(), kMagic.size());
    out.write(reinterpret_cast<const char*>(&h), sizeof h);
    const Tensor values = store.values();
    std::vector<float> host;
    for (const Tensor* t : {&values, &store.first_moments(), &store.second_moments()}) {
      host.resize(std::size_t(t->numel()));
      be.copy_to_host(host, *t);
      out.write(reinterpret_cast<const char*>(host.data()), std::streamsize(host.size() * sizeof(float)));
    }
    if (!out) throw SpecError(SourceLocation{tmp, 0, 0}, "checkpoint_dir", dir, "write failed (disk full?)");
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) throw SpecError(SourceLocation{file, 0, 0}, "checkpoint_dir", dir, "rename failed: " + ec.message());
}

void mark_latest_checkpoint(const std::string& dir, int step) {
  const std::string latest = (std::filesystem::path(dir) / "latest").string();
  {
    std::ofstream out(latest + ".tmp", std::ios::trunc);
    out << step << "\n";
    if (!out) throw SpecError(SourceLocation{latest + ".tmp", 0, 0}, "checkpoint_dir", dir, "cannot be written");
  }
  std::error_code ec;
  std::filesystem::rename(latest + ".tmp", latest, ec);
  if (ec) throw SpecError(SourceLocation{latest, 0, 0}, "checkpoint_dir", dir, "rename failed: " + ec.message());
}

int load_checkpoint(const std::string& dir, const RankLayout& layout, const ModelSpec& model, std::uint64_t seed,
                    const ParamStore& store, Backend& be) {
  const std::string latest = (std::filesystem::path(dir) / "latest").string();
  std::ifstream lin(latest);
  int step = -1;
  if (!lin) throw SpecError(SourceLocation{latest, 0, 0}, "checkpoint_dir", dir, "has no checkpoint to resume from");
  if (!(lin >> step) || step < 0)
    throw SpecError(SourceLocation{latest, 1, 0}, "step", "", "must be a non-negative step number");
  const std::string file = rank_file(dir, step, layout.rank);
  std::ifstream in(file, std::ios::binary);
  const SourceLocation where{file, 0, 0};
  if (!in)
    throw SpecError(where, "rank", std::to_string(layout.rank),
                    "has no checkpoint file for step " + std::to_string(step) + " (written by a run with fewer ranks?)");
  std::array<char, 8> magic{};
  Header h{};
  in.read(magic.data(), magic.size());
  in.read(reinterpret_cast<char*>(&h), sizeof h);
  if (in && magic == kMagicV1)
    throw SpecError(where, "header", "format 1", "is from an older foresight-train; this one reads format 2");
  if (!in || magic != kMagic) throw SpecError(where, "header", "", "is not a foresight-train checkpoint");
  const Header want = make_header(step, layout, model, seed, store);
  struct Field {
    const char* name;
    std::int64_t Header::*member;
    const char* plan_field;
  };
  static constexpr Field kFields[] = {
      {"step", &Header::step, "checkpoint_dir/latest"},  {"seed", &Header::seed, "--seed"},
      {"tp", &Header::tp, "plan.tp"},                    {"pp", &Header::pp, "plan.pp"},
      {"dp", &Header::dp, "plan.dp"},                    {"tp_rank", &Header::tp_rank, "plan.placement"},
      {"pp_rank", &Header::pp_rank, "plan.placement"},   {"dp_rank", &Header::dp_rank, "plan.placement"},
      {"layers", &Header::layers, "model.layers"},       {"hidden", &Header::hidden, "model.hidden"},
      {"heads", &Header::heads, "model.heads"},          {"seq_len", &Header::seq_len, "model.seq_len"},
      {"vocab", &Header::vocab, "model.vocab"},          {"ffn_hidden", &Header::ffn_hidden, "model.ffn_hidden"},
      {"elements", &Header::elements, "the parameters of this rank"},
      {"state_first", &Header::state_first, "the optimizer shard of this rank (plan.zero)"},
      {"state_elements", &Header::state_elements, "the optimizer shard of this rank (plan.zero)"},
      {"params_hash", &Header::params_hash,
       "the hash of this rank's parameter names and shapes (plan.virtual_stages, plan.ep, model.moe)"}};
  for (const Field& f : kFields)
    if (h.*f.member != want.*f.member)
      throw SpecError(where, f.name, std::to_string(h.*f.member),
                      std::string("must equal ") + f.plan_field + " = " + std::to_string(want.*f.member) +
                          " of this run");
  const Tensor values = store.values();
  std::vector<float> host;
  for (const Tensor* t : {&values, &store.first_moments(), &store.second_moments()}) {
    host.resize(std::size_t(t->numel()));
    in.read(reinterpret_cast<char*>(host.data()), std::streamsize(host.size() * sizeof(float)));
    if (!in) throw SpecError(where, "size", "", "is truncated");
    be.copy_from_host(*t, host);
  }
  store.update_working_copy(be);  // the bf16 working copy is not saved: it is the rounded master
  return step;
}

}  // namespace foresight::trainer
