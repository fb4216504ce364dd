// Rotate-half RoPE: dims i and i + hd/2 form a pair rotated by pos * inv_freq[i].
#pragma once
#include <vector>

namespace ds {

// The largest head_dim / 2 a caller's stack buffers hold (config.cpp bounds head_dim at 512).
inline constexpr int kMaxRopeHalf = 256;

// inv_freq[i] = 1 / theta^(2i / hd), i < hd / 2.
std::vector<float> rope_inv_freq(int hd, double theta);
// The angles' cosines and sines depend on the position only, so a token computes them once
// for all its heads, in double, which keeps every rotated value the same whoever computes it.
void rope_angles(int hd, int pos, const float* inv_freq, float* cos_out, float* sin_out);
// Rotates one head's vector in place with angles from rope_angles.
void rope_rotate(float* v, int hd, const float* c, const float* s);

}  // namespace ds
