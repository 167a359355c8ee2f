// The statistics of loss models: long-run rates and confidence intervals.
#pragma once

#include <cstdint>

#include "rules/rule.h"

namespace lossd {

// The model's long-run loss rate (Bernoulli p, Gilbert-Elliott's stationary
// mean, 1/n for every-n-th); -1 where it has none (first-k).
double ModelMeanLoss(const LossModel& m);
// 99.9 % Wilson score interval of k successes in n trials.
void WilsonInterval(uint64_t k, uint64_t n, double* lo, double* hi);

}  // namespace lossd
