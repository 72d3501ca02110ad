// TeraPipe's slicing DP against brute force over every composition of a short sequence, and
// against cases worked by hand.
#include <gtest/gtest.h>

#include <functional>

#include "planner/terapipe_slicing.hpp"

using namespace foresight;
using namespace foresight::planner;

namespace {
// A slice's time: a fixed overhead, a linear term and attention against its context.
SliceTime model(double overhead, double per_token, double per_pair) {
  return [=](int tokens, int end) { return Seconds(overhead + per_token * tokens + per_pair * tokens * end); };
}

double brute_force(int units, int g, int stages, const SliceTime& time, std::vector<int>* best_slices,
                   int microbatches = 1) {
  double best = 1e300;
  std::vector<int> cur;
  std::function<void(int)> rec = [&](int left) {
    if (left == 0) {
      const double lat = slicing_latency(cur, stages, time, microbatches).value();
      if (lat < best) {
        best = lat;
        *best_slices = cur;
      }
      return;
    }
    for (int k = 1; k <= left; ++k) {
      cur.push_back(k * g);
      rec(left - k);
      cur.pop_back();
    }
  };
  rec(units);
  return best;
}
}  // namespace

TEST(TeraPipeSlicing, MatchesBruteForce) {
  const SliceTime times[] = {model(1.0, 0.01, 0.0), model(0.2, 0.01, 1e-4), model(5.0, 0.001, 1e-3),
                             model(0.0, 1.0, 0.0)};
  for (const auto& time : times)
    for (int stages : {1, 2, 4, 16})
      for (int units : {1, 3, 6, 10}) {
        std::vector<int> bf;
        const double expected = brute_force(units, 16, stages, time, &bf);
        const Slicing s = optimal_token_slices(units * 16, stages, time, 16);
        EXPECT_NEAR(s.latency.value(), expected, 1e-9 * expected) << "stages " << stages << " units " << units;
        int sum = 0;
        for (int l : s.slices) sum += l;
        EXPECT_EQ(sum, units * 16);
      }
}

TEST(TeraPipeSlicing, HandWorkedCases) {
  // Purely linear cost, no overhead: T = L + (K-1) * max slice; with K = 4 and 4 units of cost 1
  // the best is 4 slices of 1 unit: 4 + 3 * 1 = 7 (one slice: 4 + 3 * 4 = 16).
  const Slicing s = optimal_token_slices(64, 4, model(0.0, 1.0 / 16, 0.0), 16);
  EXPECT_NEAR(s.latency.value(), 7.0, 1e-12);
  EXPECT_EQ(s.slices, (std::vector<int>{16, 16, 16, 16}));
  // One stage: nothing to pipeline, overhead per slice makes one slice best.
  const Slicing one = optimal_token_slices(64, 1, model(1.0, 1.0 / 16, 0.0), 16);
  EXPECT_EQ(one.slices, (std::vector<int>{64}));
  EXPECT_NEAR(one.latency.value(), 5.0, 1e-12);
}

TEST(TeraPipeSlicing, AttentionMakesLaterSlicesShorter) {
  // With a strong context term, slices later in the sequence are costlier per token, so the
  // optimal slices shrink towards the end (TeraPipe Fig. 4).
  const Slicing s = optimal_token_slices(2048, 48, model(1e-4, 1e-6, 2e-9), 64);
  ASSERT_GE(s.slices.size(), 3u);
  EXPECT_GE(s.slices.front(), s.slices.back());
}

TEST(TeraPipeSlicing, ManyMicroBatchesMatchBruteForce) {
  // m micro-batches sliced alike: T = m * sum + (K-1) * max.
  const SliceTime time = model(0.5, 0.01, 1e-4);
  for (int m : {2, 8, 32})
    for (int stages : {4, 16}) {
      std::vector<int> bf;
      const double expected = brute_force(8, 16, stages, time, &bf, m);
      const Slicing s = optimal_token_slices(8 * 16, stages, time, 16, m);
      EXPECT_NEAR(s.latency.value(), expected, 1e-9 * expected) << "m " << m << " stages " << stages;
    }
}

TEST(TeraPipeSlicing, ManyMicroBatchesNeedFewerSlices) {
  // Hand-worked: linear cost 1 per unit plus 1 per slice, 4 units, K = 4. One micro-batch:
  // 4 slices give 8 + 3*2 = 14, better than one slice (5 + 3*5 = 20). With m = 8 micro-batches the
  // per-slice overhead is paid 8 times: one slice gives 8*5 + 3*5 = 55, four give 8*8 + 3*2 = 70,
  // two of 2 give 8*6 + 3*3 = 57; one slice wins.
  const SliceTime time = model(1.0, 1.0 / 16, 0.0);
  EXPECT_EQ(optimal_token_slices(64, 4, time, 16, 1).slices, (std::vector<int>{16, 16, 16, 16}));
  const Slicing s = optimal_token_slices(64, 4, time, 16, 8);
  EXPECT_EQ(s.slices, (std::vector<int>{64}));
  EXPECT_NEAR(s.latency.value(), 55.0, 1e-12);
}
