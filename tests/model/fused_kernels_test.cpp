// lmforge's own CUDA kernels (model/kernels/) run only on a GPU, but their per-element math and
// index arithmetic (model/kernels/fused_math.h) are the same code on the host: here a host loop
// through them must equal the reference ops the model uses on the CPU (F::silu(a) * b and
// apply_rotary, forward and, through autograd, backward). The kernels' launch code is checked on
// a GPU by tests/train/gpu_test.cpp (label gpu) and at every GPU start-up (model/verify.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/config.h"
#include "model/fused_ops.h"
#include "model/kernels/fused_math.h"
#include "model/transformer.h"

namespace lm::model {
namespace {

namespace F = torch::nn::functional;

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

TEST(FusedMath, SwigluAndItsGradientEqualAutogradOfTheReference) {
  torch::manual_seed(1);
  auto a = torch::randn({4, 300}, torch::requires_grad()), b = torch::randn({4, 300}, torch::requires_grad());
  auto g = torch::randn({4, 300});
  auto ref = F::silu(a) * b;
  auto grads = torch::autograd::grad({ref}, {a, b}, {g});
  auto y = torch::empty_like(ref), da = torch::empty_like(ref), db = torch::empty_like(ref);
  const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>(), *pg = g.data_ptr<float>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    y.data_ptr<float>()[i] = kernels::swiglu(pa[i], pb[i]);
    kernels::swiglu_grad(pa[i], pb[i], pg[i], da.data_ptr<float>() + i, db.data_ptr<float>() + i);
  }
  EXPECT_LT(max_rel(y, ref.detach()), 1e-6);
  EXPECT_LT(max_rel(da, grads[0]), 1e-5);
  EXPECT_LT(max_rel(db, grads[1]), 1e-6);
}

// The kernel's loop over the pairs of q then k, on the host: every element written once.
void host_rope(const torch::Tensor& x, torch::Tensor& y, const torch::Tensor& cos, const torch::Tensor& sin,
               float sign) {
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
  const float *px = x.data_ptr<float>(), *pc = cos.data_ptr<float>(), *ps = sin.data_ptr<float>();
  float* py = y.data_ptr<float>();
  for (int64_t n = 0; n < B * T * H * (D / 2); ++n) {
    const kernels::RopeIndex r = kernels::rope_index(n, T, H, D);
    kernels::rope_pair(px[r.offset], px[r.offset + D / 2], pc[r.t * D + r.i], sign * ps[r.t * D + r.i],
                       py + r.offset, py + r.offset + D / 2);
  }
}

TEST(FusedMath, RopeOverQAndKEqualsApplyRotaryAndItsInverseIsTheBackward) {
  torch::manual_seed(2);
  const int64_t B = 2, T = 37, Hq = 4, Hk = 2, D = 16;
  auto [cos, sin] = rotary_tables(T, D, 10000.0, 0, torch::kCPU);
  for (int64_t H : {Hq, Hk}) {
    // The model's layout before the transpose: [B, T, H, D].
    auto x = torch::randn({B, T, H, D}, torch::requires_grad());
    auto ref = apply_rotary(x.transpose(1, 2), cos, sin).transpose(1, 2);
    auto g = torch::randn({B, T, H, D});
    auto gx = torch::autograd::grad({ref}, {x}, {g})[0];
    auto y = torch::full_like(ref, std::nanf("")), dx = torch::full_like(ref, std::nanf(""));
    host_rope(x.detach(), y, cos, sin, 1.0f);
    host_rope(g, dx, cos, sin, -1.0f);
    EXPECT_TRUE(y.isfinite().all().item<bool>()) << "an element was not written";
    EXPECT_LT(max_rel(y, ref.detach()), 1e-6) << "H = " << H;
    EXPECT_LT(max_rel(dx, gx), 1e-6) << "H = " << H;
  }
}

// A build with CUDA compiles the kernels (CI's does; only running them needs a GPU).
TEST(FusedKernels, CompiledWhereverLibTorchHasCuda) {
#ifdef LM_HAVE_CUDA
  EXPECT_TRUE(cuda_kernels_compiled());
#else
  EXPECT_FALSE(cuda_kernels_compiled());
#endif
  auto cfg = *preset("tiny");
  Transformer m(cfg);
  EXPECT_EQ(m->set_cuda_kernels(true), cuda_kernels_compiled());
  if (!cuda_kernels_compiled()) GTEST_SKIP() << "no CUDA kernels in this build";
  EXPECT_TRUE(m->cuda_swiglu());
  EXPECT_TRUE(m->cuda_rope());
  // On the CPU the model keeps its reference path: the same loss with the switch on or off.
  auto window = torch::randint(cfg.vocab_size, {2, 17}, torch::kInt64);
  const double on = m->loss(window).item<double>();
  m->set_cuda_kernels(false);
  const double off = m->loss(window).item<double>();
  EXPECT_EQ(on, off);
}

}  // namespace
}  // namespace lm::model
