// The exact law of a verifier round's outcome over its uniform draws, without sampling.
//
// A verifier reads uniforms u_1, u_2, ... in [0, 1) one after another, and each decision it takes
// compares one draw with thresholds (an acceptance test, a draw from cumulative weights): the
// outcome is piecewise constant in each draw, on intervals ordered by the draw. The explorer
// walks that decision tree: at a node (the draws read so far fixed), it finds the intervals of
// the next draw by bisecting between points whose outcomes differ, then descends into each
// interval with its midpoint, weighted by the interval's length. The leaves' weights sum to 1,
// and a leaf's weight is its probability up to the bisection's resolution (1e-11 per boundary).
//
// Where two adjacent intervals lead to different decisions, the outcome must tell them apart:
// each point is run twice, the draws after it all 0 and all just below 1 (every later test
// passes, or every later test that can fail fails), and the signature is both outcomes with the
// number of draws each read. A decision that changes neither is one no later draw can reveal.
// Equal signatures at two grid points are taken as one interval between them: right for draws
// compared with thresholds (each outcome one interval, in order), which is how the verifiers and
// Sampler::draw / sample use them; a draw used otherwise (hashed, say) would need a finer grid.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "spec_decode/verifier.h"

namespace ds::test {

class UniformExplorer {
 public:
  using Run = std::function<VerifyOutcome(const std::function<double()>& uniform)>;
  using Law = std::map<std::pair<int, int32_t>, double>;  // (accepted, next) -> probability

  // Adds the law of run's outcome, times `weight`, to *law.
  static void add_law(const Run& run, double weight, Law* law) {
    UniformExplorer e(run, law);
    std::vector<double> path;
    const Sig root = e.signature(path);
    if (root.leaf(0))
      e.add(root, weight);
    else
      e.explore(path, weight);
  }

 private:
  static constexpr double kAlmostOne = 0x1.fffffffffffffp-1;  // the largest double below 1
  static constexpr double kResolution = 1e-11;

  struct Sig {
    std::array<int, 2> accepted{}, next{}, reads{};
    bool operator==(const Sig& o) const { return accepted == o.accepted && next == o.next && reads == o.reads; }
    // Both probes read no draw past the path: the outcome is already decided.
    bool leaf(size_t depth) const { return reads[0] <= int(depth) && reads[1] <= int(depth); }
  };

  UniformExplorer(const Run& run, Law* law) : run_(run), law_(law) {}

  Sig signature(const std::vector<double>& path) const {
    Sig s;
    const double probes[2] = {0.0, kAlmostOne};
    for (int k = 0; k < 2; ++k) {
      size_t n = 0;
      const std::function<double()> uniform = [&]() { return n < path.size() ? path[n++] : (++n, probes[k]); };
      const VerifyOutcome o = run_(uniform);
      s.accepted[size_t(k)] = o.accepted;
      s.next[size_t(k)] = o.next;
      s.reads[size_t(k)] = int(n);
    }
    return s;
  }

  void add(const Sig& s, double w) { (*law_)[{s.accepted[0], s.next[0]}] += w; }

  // The node after `path`: the draw at index path.size() is read.
  void explore(std::vector<double>& path, double weight) {
    const size_t depth = path.size();
    auto sig_at = [&](double x) {
      path.push_back(x);
      const Sig s = signature(path);
      path.pop_back();
      return s;
    };
    // A coarse grid first, then the boundaries between grid points whose signatures differ.
    std::vector<double> bounds;
    std::function<void(double, const Sig&, double, const Sig&)> refine = [&](double lo, const Sig& slo, double hi,
                                                                             const Sig& shi) {
      if (slo == shi) return;
      if (hi - lo < kResolution) {
        bounds.push_back(0.5 * (lo + hi));
        return;
      }
      const double mid = 0.5 * (lo + hi);
      const Sig sm = sig_at(mid);
      refine(lo, slo, mid, sm);
      refine(mid, sm, hi, shi);
    };
    constexpr int kGrid = 8;
    double prev_x = 0.0;
    Sig prev = sig_at(0.0);
    for (int g = 1; g <= kGrid; ++g) {
      const double x = g == kGrid ? kAlmostOne : double(g) / kGrid;
      const Sig s = sig_at(x);
      refine(prev_x, prev, x, s);
      prev_x = x;
      prev = s;
    }
    bounds.push_back(1.0);
    double lo = 0.0;
    for (double hi : bounds) {
      const double width = hi - lo;
      if (width > 0) {
        path.push_back(0.5 * (lo + hi));
        const Sig s = signature(path);
        if (s.leaf(depth + 1))
          add(s, weight * width);
        else
          explore(path, weight * width);
        path.pop_back();
      }
      lo = hi;
    }
  }

  const Run& run_;
  Law* law_;
};

}  // namespace ds::test
