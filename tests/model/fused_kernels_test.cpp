// lmforge's own CUDA kernels (model/kernels/) run only on a GPU, but their per-element math and
// index arithmetic (model/kernels/fused_math.h) are the same code on the host: here a host loop
// through them must equal the reference ops the model uses on the CPU (F::silu(a) * b and
// apply_rotary, the residual add then reference_rms_norm; forward and, through autograd,
// backward). The kernels' launch code is checked on a GPU by tests/train/gpu_test.cpp (label gpu)
// and at every GPU start-up (model/verify.h).
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

// The add_rms_norm kernels' per-row algorithm on the host, rows split over `blocks` as the
// backward's grid does, each block's dw kept apart and summed at the end (the wrapper's sum(0)).
struct HostAddNorm {
  torch::Tensor s, y, rstd, ds, dw;
};
HostAddNorm host_add_rms_norm(const torch::Tensor& x, const torch::Tensor& r, const torch::Tensor& w,
                              const torch::Tensor& dy, const torch::Tensor& ds_in, float eps, int64_t blocks) {
  const int64_t C = x.size(-1), rows = x.numel() / C;
  HostAddNorm o{torch::empty_like(x), torch::empty_like(x), torch::empty({rows}), torch::empty_like(x),
                torch::zeros({blocks, C})};
  const float *px = x.data_ptr<float>(), *pr = r.data_ptr<float>(), *pw = w.data_ptr<float>();
  float *ps = o.s.data_ptr<float>(), *py = o.y.data_ptr<float>(), *prs = o.rstd.data_ptr<float>();
  for (int64_t row = 0; row < rows; ++row) {
    float sum_sq = 0;
    for (int64_t j = 0; j < C; ++j) {
      ps[row * C + j] = px[row * C + j] + pr[row * C + j];
      sum_sq += ps[row * C + j] * ps[row * C + j];
    }
    prs[row] = kernels::rms_rstd(sum_sq, C, eps);
    for (int64_t j = 0; j < C; ++j) py[row * C + j] = kernels::rms_norm_out(ps[row * C + j], prs[row], pw[j]);
  }
  const float *pdy = dy.data_ptr<float>(), *pin = ds_in.data_ptr<float>();
  float *pds = o.ds.data_ptr<float>(), *pdw = o.dw.data_ptr<float>();
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t row = b; row < rows; row += blocks) {
      float dot = 0;
      for (int64_t j = 0; j < C; ++j) dot += pdy[row * C + j] * pw[j] * (ps[row * C + j] * prs[row]);
      const float mean_gn = dot / static_cast<float>(C);
      for (int64_t j = 0; j < C; ++j) {
        const float n = ps[row * C + j] * prs[row];
        pds[row * C + j] = kernels::rms_norm_grad(pdy[row * C + j], pw[j], n, prs[row], mean_gn, pin[row * C + j]);
        pdw[b * C + j] += pdy[row * C + j] * n;
      }
    }
  }
  o.dw = o.dw.sum(0);
  return o;
}

// s = x + r, y = reference_rms_norm(s) * w; gradients reach both s (the residual stream's later
// uses) and y, as in the model.
TEST(FusedMath, AddRmsNormAndItsGradientsEqualAutogradOfTheReference) {
  torch::manual_seed(3);
  const int64_t rows = 37, C = 96;
  const double eps = 1e-5;
  auto x = torch::randn({rows, C}, torch::requires_grad()), r = torch::randn({rows, C}, torch::requires_grad());
  auto w = (1.0 + 0.1 * torch::randn({C})).requires_grad_(true);
  auto s = x + r;
  auto y = reference_rms_norm(s, w, eps);
  auto dy = torch::randn({rows, C}), ds_in = torch::randn({rows, C});
  auto grads = torch::autograd::grad({s, y}, {x, r, w}, {ds_in, dy});
  for (int64_t blocks : {int64_t{1}, int64_t{5}, rows}) {
    auto o = host_add_rms_norm(x.detach(), r.detach(), w.detach(), dy, ds_in, static_cast<float>(eps), blocks);
    EXPECT_LT(max_rel(o.s, s.detach()), 1e-7);
    EXPECT_LT(max_rel(o.y, y.detach()), 1e-6);
    EXPECT_LT(max_rel(o.ds, grads[0]), 1e-5) << "blocks " << blocks;  // ds is dx and dr both
    EXPECT_LT(max_rel(o.ds, grads[1]), 1e-5) << "blocks " << blocks;
    EXPECT_LT(max_rel(o.dw, grads[2]), 1e-5) << "blocks " << blocks;
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
  EXPECT_TRUE(m->cuda_add_norm());
  // On the CPU the model keeps its reference path: the same loss with the switch on or off.
  auto window = torch::randint(cfg.vocab_size, {2, 17}, torch::kInt64);
  const double on = m->loss(window).item<double>();
  m->set_cuda_kernels(false);
  const double off = m->loss(window).item<double>();
  EXPECT_EQ(on, off);
}


// hidden() regrouped for the fused residual add + norm (each sublayer's output joins the stream
// in the pass that normalises it for the next sublayer) equals Block::forward's order. On the CPU
// the add and the norm stay apart, so loss and gradients must be bit-identical; the norm weights
// are drawn apart from 1 so that a wrong next norm shows.
TEST(FusedKernels, AddNormRegroupingEqualsTheBlocksBitForBit) {
  auto cfg = *preset("tiny");
  Transformer m(cfg);
  m->set_cpu_kernels(false);  // add and norm apart on the CPU (tests/model/cpu_kernels_test.cpp has the kernel)
  m->init_weights(4);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : m->parameters())
      if (p.dim() == 1) p.copy_(1.0 + 0.2 * torch::randn(p.sizes()));
  }
  auto window = torch::randint(cfg.vocab_size, {2, 17}, torch::kInt64);
  std::vector<torch::Tensor> loss, grads[2];
  for (bool regrouped : {false, true}) {
    m->set_cuda_add_norm(regrouped);
    m->zero_grad();
    auto l = m->loss(window);
    l.backward();
    loss.push_back(l.detach());
    for (const auto& p : m->parameters())  // a parameter the loop skipped has no gradient: NaN stands in
      grads[regrouped].push_back(p.grad().defined() ? p.grad().clone() : torch::full_like(p, std::nanf("")));
  }
  EXPECT_TRUE(torch::equal(loss[0], loss[1])) << loss[0].item<double>() << " vs " << loss[1].item<double>();
  for (size_t i = 0; i < grads[0].size(); ++i)
    EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i])) << "parameter " << i;
}

}  // namespace
}  // namespace lm::model
