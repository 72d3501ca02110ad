// TeraPipe's token-slicing optimiser (Li et al. 2021, "TeraPipe", ICML, sec. 3.3 and Algorithm 1):
// cut a sequence of L tokens into slices l_1..l_n so that the pipeline latency
//   T = sum_i t_i + (K - 1) * max_i t_i
// is minimal, where t_i is the time of slice i on one stage (it grows with the slice's context,
// the tokens before it) and K the number of pipeline stages. For each candidate bound t_max on
// the slowest slice, a dynamic program finds the cheapest slicing whose slices all take at most
// t_max; the best bound wins. Slices are multiples of `granularity` tokens.
// With m micro-batches (sequences, or batch slices) each cut the same way, every stage runs m times
// the slices and the pipeline fills once: T = m * sum_i t_i + (K - 1) * max_i t_i (sec. 3.3 over
// the whole input; TeraPipe's joint batch/token DP, sec. 3.4, with the batch slicing fixed).
#pragma once

#include <functional>
#include <vector>

#include "core/units.hpp"

namespace foresight::planner {

/// Time of a slice of `tokens` tokens that ends at position `end` (its context), on one stage.
using SliceTime = std::function<Seconds(int tokens, int end)>;

struct Slicing {
  std::vector<int> slices;  // lengths, in order, summing to the sequence length
  Seconds latency;          // microbatches * sum of slice times + (stages - 1) * slowest
};

/// The optimal slicing of `seq_len` tokens (a multiple of `granularity`) over `stages` stages.
Slicing optimal_token_slices(int seq_len, int stages, const SliceTime& time, int granularity, int microbatches = 1);

/// The pipeline latency of a given slicing (the objective above).
Seconds slicing_latency(const std::vector<int>& slices, int stages, const SliceTime& time, int microbatches = 1);

}  // namespace foresight::planner
