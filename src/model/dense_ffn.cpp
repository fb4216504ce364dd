#include "model/dense_ffn.h"

#include "kernels/elementwise.h"
#include "core/work_sharing.h"

namespace ds {

DenseFfn::DenseFfn(const WeightLoader& w, const std::string& gate, const std::string& up, const std::string& down,
                   int hidden, int inter)
    : hidden_(hidden), inter_(inter) {
  gate_up_ = w.stacked({{gate, inter}, {up, inter}}, hidden);
  down_ = w.linear(down, hidden, inter);
}

void DenseFfn::forward(const StepContext& ctx, const float* h, float* x, int rows) const {
  if (rows == 0) return;
  const size_t m = ctx.arena->mark();
  float* GU = ctx.arena->alloc<float>(size_t(rows) * size_t(2 * inter_));
  float* A = ctx.arena->alloc<float>(size_t(rows) * size_t(inter_));
  matmul(h, size_t(hidden_), gate_up_, GU, size_t(2 * inter_), rows, ctx.pool);
  for (int r = 0; r < rows; ++r)
    silu_mul(GU + size_t(r) * size_t(2 * inter_), GU + size_t(r) * size_t(2 * inter_) + inter_,
             A + size_t(r) * size_t(inter_), inter_);
  matmul(A, size_t(inter_), down_, x, size_t(hidden_), rows, ctx.pool, /*accumulate=*/true);
  ctx.arena->rewind(m);
}

}  // namespace ds
