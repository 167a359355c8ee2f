// The statistics of loss models: long-run rates and confidence intervals.
#pragma once

#include <cstdint>

#include "rules/rule.h"

namespace lossd {

// The model's long-run loss rate (Bernoulli p, Gilbert-Elliott's and the
// 4-state Markov chain's stationary mean, 1/n for every-n-th); -1 where it has
// none independent of the traffic (first-k, a policer).
double ModelMeanLoss(const LossModel& m);
// Every-n-th and first-k: what they drop follows from the packets each flow
// sent, so a rule of one has an expected count of drops, not a rate to test.
// (A policer's follows from the traffic's rate: neither a rate nor a count.)
bool ModelIsDeterministic(const LossModel& m);
// What a deterministic model drops of a flow whose first `packets` packets the
// rule decided on: every n-th, floor(packets / n); first k, min(packets, k).
// 0 for the random models.
uint64_t ModelExpectedDrops(const LossModel& m, uint64_t packets);
// 99.9 % Wilson score interval of k successes in n trials.
void WilsonInterval(uint64_t k, uint64_t n, double* lo, double* hi);

}  // namespace lossd
