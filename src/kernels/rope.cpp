#include "kernels/rope.h"

#include <cmath>

namespace ds {

std::vector<float> rope_inv_freq(int hd, double theta) {
  std::vector<float> f;
  for (int i = 0; i < hd / 2; ++i) f.push_back(float(1.0 / std::pow(theta, double(2 * i) / double(hd))));
  return f;
}

void rope_angles(int hd, int pos, const float* inv_freq, float* cos_out, float* sin_out) {
  for (int i = 0; i < hd / 2; ++i) {
    const double a = double(pos) * double(inv_freq[i]);
    cos_out[i] = float(std::cos(a));
    sin_out[i] = float(std::sin(a));
  }
}

void rope_rotate(float* v, int hd, const float* c, const float* s) {
  const int half = hd / 2;
  for (int i = 0; i < half; ++i) {
    const float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * c[i] - x1 * s[i];
    v[i + half] = x1 * c[i] + x0 * s[i];
  }
}

}  // namespace ds
