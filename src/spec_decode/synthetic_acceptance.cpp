#include "spec_decode/synthetic_acceptance.h"

#include "core/error.h"

namespace ds {

namespace {
double mean_length(double a, int k) {
  double s = 1, p = 1;
  for (int i = 0; i < k; ++i) s += (p *= a);
  return s;
}
}  // namespace

SyntheticAcceptance::SyntheticAcceptance(double al, int k) : al_(al), k_(k) {
  DS_CHECK(k >= 1 && al >= 1.0 && al <= double(k + 1),
           "synthetic acceptance length " + std::to_string(al) + " outside [1, " + std::to_string(k + 1) + "]");
  // mean_length rises monotonically in alpha: bisect.
  double lo = 0, hi = 1;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (mean_length(mid, k) < al ? lo : hi) = mid;
  }
  alpha_ = al >= double(k + 1) ? 1.0 : al <= 1.0 ? 0.0 : 0.5 * (lo + hi);
}

int SyntheticAcceptance::draw(int k, const std::function<double()>& uniform) const {
  int a = 0;
  while (a < k && (alpha_ >= 1.0 || uniform() < alpha_)) ++a;
  return a;
}

}  // namespace ds
