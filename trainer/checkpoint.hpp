// Checkpoints: one file per rank with its parameters and both AdamW moments (fp32: the master
// values under a bf16 recipe, whose working copy is rebuilt from them; with ZeRO-1 the moments of
// its shard only), under
// <dir>/step_NNNNNN/rank_NNNNN.bin, and <dir>/latest naming the newest complete step (written by
// rank 0 after every rank has renamed its file into place, so a crash never leaves `latest`
// pointing at a partial checkpoint). The header records the layout and the model, and loading
// refuses a checkpoint that does not match the plan. Data-reader and RNG state need no saving:
// samples and initial values are pure functions of (seed, step, index).
#pragma once

#include <cstdint>
#include <string>

#include "core/model.hpp"
#include "trainer/backend.hpp"
#include "trainer/layout.hpp"
#include "trainer/params.hpp"

namespace foresight::trainer {

/// Writes this rank's state after `step` completed steps (atomically: temporary file, rename).
void save_checkpoint(const std::string& dir, int step, const RankLayout& layout, const ModelSpec& model,
                     std::uint64_t seed, const ParamStore& store, Backend& be);

/// Points <dir>/latest at `step`; one rank calls it once every rank's file is in place.
void mark_latest_checkpoint(const std::string& dir, int step);

/// Loads the newest checkpoint under `dir` into `store` and returns its step. Throws SpecError
/// naming the file, the field, the value and the rule on a missing file or any mismatch with the
/// plan (layout, model shape, seed, parameter count). Not collective: see agree() in trainer.cpp.
int load_checkpoint(const std::string& dir, const RankLayout& layout, const ModelSpec& model, std::uint64_t seed,
                    const ParamStore& store, Backend& be);

}  // namespace foresight::trainer
