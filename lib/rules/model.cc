#include "rules/model.h"

#include <algorithm>
#include <cmath>

namespace lossd {

double ModelMeanLoss(const LossModel& m) {
  switch (m.kind) {
    case LossModel::Kind::kBernoulli: return m.p;
    case LossModel::Kind::kGilbertElliott: {
      double sum = m.p + m.r;
      double bad = sum > 0 ? m.p / sum : 0;
      return bad * m.bad_loss + (1 - bad) * m.good_loss;
    }
    case LossModel::Kind::kEveryNth: return m.n ? 1.0 / m.n : 0;
    case LossModel::Kind::kFirstK: return -1;
    case LossModel::Kind::kRamp: {  // over its time, as if the traffic were even
      double sum = 0, t = 0;
      for (const auto& st : m.steps) {
        sum += st.rate * double(st.duration.count());
        t += double(st.duration.count());
      }
      return t > 0 ? sum / t : 0;
    }
  }
  return -1;
}

bool ModelIsDeterministic(const LossModel& m) {
  return m.kind == LossModel::Kind::kEveryNth || m.kind == LossModel::Kind::kFirstK;
}

uint64_t ModelExpectedDrops(const LossModel& m, uint64_t packets) {
  switch (m.kind) {
    case LossModel::Kind::kEveryNth: return m.n ? packets / m.n : 0;
    case LossModel::Kind::kFirstK: return packets < m.n ? packets : m.n;
    default: return 0;
  }
}

void WilsonInterval(uint64_t k, uint64_t n, double* lo, double* hi) {
  if (n == 0) {
    *lo = 0;
    *hi = 1;
    return;
  }
  const double z = 3.2905267314919255;  // two-sided 99.9 %
  double p = double(k) / double(n), nn = double(n);
  double denom = 1 + z * z / nn;
  double centre = (p + z * z / (2 * nn)) / denom;
  double half = z * std::sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn)) / denom;
  *lo = k == 0 ? 0.0 : std::max(0.0, centre - half);
  *hi = k == n ? 1.0 : std::min(1.0, centre + half);  // no rounding below 1 at 100 %
}

}  // namespace lossd
