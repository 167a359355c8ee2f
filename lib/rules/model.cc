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
    case LossModel::Kind::kMarkov4: {
      // The stationary distribution, pi1 = 1 (unnormalised): state 4 is entered from 1
      // only and left at once (pi4 = p14 pi1); 3's inflow from 1 leaves by 3 -> 1
      // (2 returns what it takes to 3: pi3 = pi1 p13 / p31); 2 is entered from 3 and
      // left to 3 (pi2 = pi3 p32 / p23). A packet entering 3 or 4 is lost: in
      // stationarity the share of time in them. A chain CheckMarkov refuses: -1.
      if ((m.p13 > 0 && !(m.p31 > 0)) || (m.p32 > 0 && !(m.p23 > 0))) return -1;
      double pi4 = m.p14;
      double pi3 = m.p13 > 0 ? m.p13 / m.p31 : 0;
      double pi2 = m.p32 > 0 ? pi3 * m.p32 / m.p23 : 0;
      return (pi3 + pi4) / (1 + pi2 + pi3 + pi4);
    }
    case LossModel::Kind::kPolice: return -1;  // its drops follow the traffic's rate
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
