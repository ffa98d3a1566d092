// lmforge's own CPU kernels (model/kernels/cpu_kernels.h through model/fused_ops.h) against
// their reference ops, forward and gradients, in fp32 and bf16; the model with them against the
// model without them; and the start-up registry catching a planted break in each.
//
// Tolerances: fp32 kernels reorder sums and use their own exp (8e-8 relative), so 2e-6 of the
// largest magnitude. bf16 kernels compute in fp32 from the same bf16 inputs and round once,
// so against the fp32 reference on those inputs they may differ by one rounding: half a bf16
// ulp, 2^-9 of the element, bounded here by 2^-8 (3.9e-3) of the largest magnitude.
#include <gtest/gtest.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/fused_ops.h"
#include "model/kernels/cpu_kernels.h"
#include "model/transformer.h"
#include "model/verify.h"

namespace lm::model {
namespace {

namespace F = torch::nn::functional;
using Tensors = std::vector<torch::Tensor>;

constexpr double kFp32Tol = 2e-6;
constexpr double kBf16Tol = 3.9e-3;

double tol(torch::ScalarType dt) { return dt == torch::kBFloat16 ? kBf16Tol : kFp32Tol; }

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto af = a.to(torch::kFloat64), bf = b.to(torch::kFloat64);
  return ((af - bf).abs().max() / bf.abs().max()).item<double>();
}

// Inputs rounded to `dt` (so both sides see the same values), as leaves requiring grad.
torch::Tensor leaf(std::vector<int64_t> shape, torch::ScalarType dt, double scale = 1.0) {
  return (scale * torch::randn(shape)).to(dt).requires_grad_(true);
}

// Upstream gradients rounded to `dt`, so both sides get the same values.
torch::Tensor upstream(std::vector<int64_t> shape, torch::ScalarType dt) { return torch::randn(shape).to(dt); }

// Outputs and input gradients of `fn` for upstream gradients `up`; the reference side runs in
// fp32 on fp32 copies of the inputs.
std::pair<Tensors, Tensors> run(const std::function<Tensors(const Tensors&)>& fn, const Tensors& in, const Tensors& up,
                                bool fp32) {
  Tensors x;
  for (const auto& t : in) x.push_back((fp32 ? t.detach().to(torch::kFloat32) : t.detach()).requires_grad_(true));
  auto out = fn(x);
  Tensors ups;
  for (size_t i = 0; i < out.size(); ++i) ups.push_back(up[i].to(out[i].scalar_type()));
  auto grads = torch::autograd::grad(out, x, ups);
  for (auto& o : out) o = o.detach();
  return {out, grads};
}

void expect_close(const std::pair<Tensors, Tensors>& got, const std::pair<Tensors, Tensors>& want, double tolerance,
                  const std::string& what) {
  for (size_t i = 0; i < want.first.size(); ++i)
    EXPECT_LE(max_rel(got.first[i], want.first[i]), tolerance) << what << ": output " << i;
  for (size_t i = 0; i < want.second.size(); ++i)
    EXPECT_LE(max_rel(got.second[i], want.second[i]), tolerance) << what << ": gradient of input " << i;
}

const torch::ScalarType kDtypes[] = {torch::kFloat32, torch::kBFloat16};

TEST(CpuKernels, SwigluEqualsSiluTimesUpForwardAndBackward) {
  for (auto dt : kDtypes) {
    torch::manual_seed(1);
    // 3 x 1001: a length no vector width divides, several threads' shares; gate values out to
    // +-12 reach silu's saturated tails.
    Tensors in = {leaf({3, 1001}, dt, 4.0), leaf({3, 1001}, dt)}, up = {upstream({3, 1001}, dt)};
    auto got = run([](const Tensors& x) { return Tensors{fused_swiglu(x[0], x[1])}; }, in, up, false);
    auto want = run([](const Tensors& x) { return Tensors{F::silu(x[0]) * x[1]}; }, in, up, true);
    expect_close(got, want, tol(dt), std::string("swiglu ") + c10::toString(dt));
  }
}

TEST(CpuKernels, RopeEqualsApplyRotaryForwardAndBackward) {
  for (auto dt : kDtypes) {
    torch::manual_seed(2);
    const int64_t B = 2, T = 7, Hq = 3, Hk = 1, D = 10;  // grouped-query k, D/2 odd
    auto [cos, sin] = rotary_tables(T + 3, D, 10000.0, 0, torch::kCPU);  // tables longer than T, as in generation
    Tensors in = {leaf({B, T, Hq, D}, dt), leaf({B, T, Hk, D}, dt)};
    Tensors up = {upstream({B, T, Hq, D}, dt), upstream({B, T, Hk, D}, dt)};
    auto got = run([&](const Tensors& x) {
      auto [q, k] = fused_rope(x[0], x[1], cos, sin);
      return Tensors{q, k};
    }, in, up, false);
    auto c = cos.narrow(0, 0, T), s = sin.narrow(0, 0, T);
    auto want = run([&](const Tensors& x) {
      return Tensors{apply_rotary(x[0].transpose(1, 2), c, s).transpose(1, 2),
                     apply_rotary(x[1].transpose(1, 2), c, s).transpose(1, 2)};
    }, in, up, true);
    expect_close(got, want, tol(dt), std::string("rope ") + c10::toString(dt));
  }
}

// The residual stream in fp32, the sublayer output and the normalised output in `dt` (as under
// autocast; all fp32 in an fp32 run). Gradients reach both s and y.
TEST(CpuKernels, AddRmsNormEqualsAddThenReferenceNormForwardAndBackward) {
  for (auto dt : kDtypes) {
    torch::manual_seed(3);
    const int64_t rows = 131, C = 72;  // 131 rows: three blocks of the backward's dw, one partial
    Tensors in = {leaf({rows, C}, torch::kFloat32, 2.0), leaf({rows, C}, dt), 1.0 + 0.2 * torch::randn({C})};
    in[2].requires_grad_(true);
    Tensors up = {upstream({rows, C}, torch::kFloat32), upstream({rows, C}, dt)};
    auto got = run([&](const Tensors& x) {
      auto [s, y] = fused_add_rms_norm(x[0], x[1], x[2], 1e-5, dt);
      return Tensors{s, y};
    }, in, up, false);
    auto want = run([&](const Tensors& x) {
      auto s = x[0] + x[1];
      return Tensors{s, reference_rms_norm(s, x[2], 1e-5)};
    }, in, up, true);
    expect_close(got, want, tol(dt), std::string("add_rms_norm ") + c10::toString(dt));
    EXPECT_EQ(got.first[1].scalar_type(), dt);
    EXPECT_EQ(got.second[1].scalar_type(), dt) << "the sublayer output's gradient comes back in its dtype";
  }
}

TEST(CpuKernels, RmsNormEqualsReferenceForwardAndBackward) {
  for (auto dt : kDtypes) {
    torch::manual_seed(4);
    Tensors in = {leaf({2, 37, 72}, torch::kFloat32, 3.0), 1.0 + 0.2 * torch::randn({72})};
    in[1].requires_grad_(true);
    Tensors up = {upstream({2, 37, 72}, dt)};
    auto got = run([&](const Tensors& x) { return Tensors{cpu_fused_rms_norm(x[0], x[1], 1e-5, dt)}; }, in, up, false);
    auto want = run([&](const Tensors& x) { return Tensors{reference_rms_norm(x[0], x[1], 1e-5)}; }, in, up, true);
    expect_close(got, want, tol(dt), std::string("rms_norm ") + c10::toString(dt));
  }
}

// The chunked loss with the CPU row kernel against nll_loss(log_softmax(h wT)): loss and both
// gradients, several chunks and a partial last one, a scaled upstream gradient, and (fp32) rows
// whose target probability underflows (exact: the kernel forms the log-sum-exp directly). Both
// sides take the same inputs in `dt` (in bf16 the logits are the matmul's bf16 output on both).
TEST(CpuKernels, CrossEntropyRowsEqualTheReferenceLossAndGradients) {
  for (auto dt : kDtypes) {
    torch::manual_seed(5);
    Tensors in = {leaf({300, 32}, dt), leaf({997, 32}, dt, 0.5)};
    auto t = torch::randint(0, 997, {300}, torch::kInt64);
    if (dt == torch::kFloat32) {
      torch::NoGradGuard no_grad;
      in[0].narrow(0, 0, 4).mul_(60.0);  // logits of ~hundreds: p[target] below fp32's range
    }
    Tensors up = {torch::full({}, 0.25)};
    auto got = run([&](const Tensors& x) { return Tensors{linear_cross_entropy(x[0], x[1], t, 64, true)}; }, in, up,
                   false);
    auto want = run([&](const Tensors& x) { return Tensors{reference_linear_cross_entropy(x[0], x[1], t)}; }, in, up,
                    false);
    ASSERT_TRUE(std::isfinite(got.first[0].item<double>()));
    if (dt == torch::kFloat32) {
      EXPECT_GT(want.first[0].item<double>(), 5.0) << "the underflowing rows count";
    }
    // fp32: reassociation only, 1e-5. bf16: the two matmuls may round a logit differently
    // (another GEMM kernel), by one bf16 ulp: 1e-3 on the mean loss, and the gradients, rounded
    // to bf16 and passed through bf16 matmuls on both sides, 2e-2 (the registry's bf16 bound).
    const bool b = dt == torch::kBFloat16;
    EXPECT_NEAR(got.first[0].item<double>(), want.first[0].item<double>(), (b ? 1e-3 : 1e-5) * want.first[0].item<double>());
    const double gt = b ? 2e-2 : 1e-5;
    EXPECT_LE(max_rel(got.second[0], want.second[0]), gt) << c10::toString(dt);
    EXPECT_LE(max_rel(got.second[1], want.second[1]), gt) << c10::toString(dt);
    // Without autograd: the same loss, bit for bit.
    torch::NoGradGuard no_grad;
    EXPECT_EQ(linear_cross_entropy(in[0], in[1], t, 64, true).item<double>(), got.first[0].item<double>());
  }
}

// q, k, v as the model gives them: [B, H, T, D] views of [B, T, H, D] storage.
torch::Tensor heads_leaf(int64_t B, int64_t H, int64_t T, int64_t D, torch::ScalarType dt) {
  return torch::randn({B, T, H, D}).to(dt).transpose(1, 2).requires_grad_(true);
}

// cpu_causal_attention against matmul-softmax-matmul in fp32 (causal): in bf16 ATen's flash
// forward and lmforge's backward, in fp32 both passes lmforge's (row blocks of 64).
// T = 70 and 150: no block or vector width divides them (two and three row blocks, the last
// partial). bf16: the backward's three gradient matmuls take P and dS rounded to bf16 (as ATen's
// flash backward does), so up to 1e-2 of the largest magnitude rather than one rounding.
TEST(CpuKernels, AttentionEqualsMatmulSoftmaxMatmulForwardAndBackward) {
  ASSERT_TRUE(kernels::cpu::attention_f32_available()) << "LibTorch's BLAS (sgemm_) was not found";
  EXPECT_TRUE(cpu_causal_attention_routes(torch::kFloat32));
  EXPECT_TRUE(cpu_causal_attention_routes(torch::kBFloat16));
  EXPECT_FALSE(cpu_causal_attention_routes(torch::kHalf));
  for (auto [dt, T] : {std::pair{torch::kFloat32, 70}, std::pair{torch::kFloat32, 150}, std::pair{torch::kBFloat16, 70}}) {
    torch::manual_seed(9);
    Tensors in = {heads_leaf(2, 3, T, 16, dt), heads_leaf(2, 3, T, 16, dt), heads_leaf(2, 3, T, 16, dt)};
    Tensors up = {upstream({2, 3, T, 16}, dt)};
    ASSERT_TRUE(cpu_causal_attention_takes(in[0], in[1], in[2]));
    auto got = run([](const Tensors& x) { return Tensors{cpu_causal_attention(x[0], x[1], x[2])}; }, in, up, false);
    auto want = run([](const Tensors& x) { return Tensors{reference_attention(x[0], x[1], x[2], true)}; }, in, up, true);
    expect_close(got, want, dt == torch::kBFloat16 ? 1e-2 : kFp32Tol, std::string("attention ") + c10::toString(dt));
  }
  // Grouped-query k, v stay on SDPA.
  auto q = torch::randn({1, 4, 8, 16}), kv = torch::randn({1, 2, 8, 16});
  EXPECT_FALSE(cpu_causal_attention_takes(q, kv, kv));
  EXPECT_THROW(cpu_causal_attention(q, kv, kv), c10::Error);
}

TEST(CpuKernels, NanReachesTheOutputs) {
  // The NaN sentinel must still see a NaN that enters these kernels.
  auto a = torch::randn({64}), b = torch::randn({64});
  a[17] = std::nanf("");
  EXPECT_TRUE(std::isnan(fused_swiglu(a, b)[17].item<float>()));
  auto x = torch::randn({4, 64});
  x[2][5] = std::nanf("");
  auto y = cpu_fused_rms_norm(x, torch::ones({64}), 1e-5, torch::kBFloat16);
  EXPECT_TRUE(std::isnan(y[2][0].to(torch::kFloat32).item<float>()));
  auto logits = torch::randn({3, 500});
  logits[1][400] = std::nanf("");
  EXPECT_TRUE(std::isnan(cpu_softmax_xent_(logits, torch::tensor({1, 2, 3}, torch::kInt64), 0.0)));
}

TEST(CpuKernels, ResultsDoNotDependOnTheThreadCount) {
  // Rows are independent and dw is summed in fixed blocks: bit-identical on 1 and 2 threads.
  const int saved = at::get_num_threads();
  torch::manual_seed(6);
  auto x = torch::randn({4096, 64}), r = torch::randn({4096, 64}), w = torch::randn({64});
  Tensors got[2];
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    auto xl = x.clone().requires_grad_(true), wl = w.clone().requires_grad_(true);
    auto [s, y] = fused_add_rms_norm(xl, r, wl, 1e-5, torch::kFloat32);
    auto g = torch::autograd::grad({y}, {xl, wl}, {torch::ones_like(y)});
    got[threads - 1] = {y.detach(), g[0], g[1]};
  }
  at::set_num_threads(saved);
  for (size_t i = 0; i < got[0].size(); ++i) EXPECT_TRUE(torch::equal(got[0][i], got[1][i])) << i;
}

TEST(CpuKernels, AttentionDoesNotDependOnTheThreadCount) {
  // Heads are independent (one head per task, its BLAS calls on that thread): bit-identical too.
  const int saved = at::get_num_threads();
  for (auto dt : kDtypes) {
    torch::manual_seed(5);
    Tensors in = {heads_leaf(2, 3, 70, 16, dt), heads_leaf(2, 3, 70, 16, dt), heads_leaf(2, 3, 70, 16, dt)};
    auto up = upstream({2, 3, 70, 16}, dt);
    Tensors got[2];
    for (int threads : {1, 2}) {
      at::set_num_threads(threads);
      auto y = cpu_causal_attention(in[0], in[1], in[2]);
      auto g = torch::autograd::grad({y}, in, {up});
      got[threads - 1] = {y.detach(), g[0], g[1], g[2]};
    }
    for (size_t i = 0; i < got[0].size(); ++i) EXPECT_TRUE(torch::equal(got[0][i], got[1][i])) << i << " " << dt;
  }
  at::set_num_threads(saved);
}

TEST(CpuKernels, XentRowsEqualLogSoftmaxAndLeaveTheLogitsAlone) {
  // Evaluation's per-row NLL (cpu_softmax_xent_rows) against ATen's log_softmax in fp32, on fp32
  // and bf16 logits of a vocabulary that is not a multiple of the vector width.
  for (auto dt : kDtypes) {
    torch::manual_seed(11);
    auto logits = (torch::randn({37, 8003}) * 4).to(dt);
    auto targets = torch::randint(8003, {37}, torch::kInt64);
    const auto before = logits.clone();
    auto got = cpu_softmax_xent_rows(logits, targets);
    auto want = -torch::log_softmax(logits.to(torch::kFloat32), -1).gather(1, targets.unsqueeze(1)).squeeze(1);
    ASSERT_EQ(got.scalar_type(), torch::kFloat64);
    EXPECT_TRUE(torch::allclose(got, want.to(torch::kFloat64), 1e-6, 2e-5)) << dt << " max |diff| "
        << (got - want.to(torch::kFloat64)).abs().max().item<double>();
    EXPECT_TRUE(torch::equal(logits, before)) << dt;
    EXPECT_NEAR(got.sum().item<double>(), cpu_softmax_xent_(logits.clone(), targets, 0.0), 1e-6 * 37 * 10) << dt;
  }
  EXPECT_THROW(cpu_softmax_xent_rows(torch::zeros({2, 5}), torch::tensor({0, 5}, torch::kInt64)), c10::Error);
}

TEST(CpuKernels, TheKernelsTakeFp32AndBf16CpuTensorsOnly) {
  EXPECT_TRUE(cpu_kernels_take(torch::zeros({2}, torch::kBFloat16)));
  EXPECT_FALSE(cpu_kernels_take(torch::zeros({2}, torch::kFloat16)));
  EXPECT_FALSE(cpu_kernels_take(torch::zeros({2}, torch::kFloat64)));
  EXPECT_THROW(fused_swiglu(torch::zeros({2}, torch::kFloat64), torch::zeros({2}, torch::kFloat64)), c10::Error);
  EXPECT_THROW(cpu_softmax_xent_(torch::zeros({2, 5}), torch::tensor({0, 5}, torch::kInt64), 0.0), c10::Error);
}

// The whole model with the CPU kernels against the model without them: loss and every
// parameter's gradient, fp32 (1e-5: the kernels' reassociation through two layers) and under
// bf16 autocast (2e-2, the registry's bf16 tolerance: roundings in other places).
TEST(CpuKernels, TheModelWithThemGivesTheReferenceLossAndGradients) {
  // tiny groups its k, v heads (SDPA's path); with as many kv heads as heads the attention
  // backward is lmforge's too.
  for (bool grouped : {true, false}) {
    auto cfg = *preset("tiny");
    if (!grouped) cfg.n_kv_heads = cfg.n_heads;
    torch::manual_seed(7);
    auto window = torch::randint(cfg.vocab_size, {2, 33}, torch::kInt64);
    for (bool bf16 : {false, true}) {
      Transformer m(cfg);
      {
        torch::NoGradGuard no_grad;  // norm weights away from 1, so a misplaced weight shows
        for (auto& p : m->parameters())
          if (p.dim() == 1) p.copy_(1.0 + 0.2 * torch::randn(p.sizes()));
      }
      Tensors loss, grads[2];
      for (bool on : {false, true}) {
        m->set_cpu_kernels(on);
        m->zero_grad();
        at::autocast::set_autocast_enabled(torch::kCPU, bf16);
        at::autocast::set_autocast_dtype(torch::kCPU, torch::kBFloat16);
        auto l = m->loss(window);
        at::autocast::set_autocast_enabled(torch::kCPU, false);
        at::autocast::clear_cache();
        l.backward();
        loss.push_back(l.detach());
        for (const auto& p : m->parameters()) grads[on].push_back(p.grad().clone());
      }
      const double t = bf16 ? 2e-2 : 1e-5;
      EXPECT_NEAR(loss[1].item<double>(), loss[0].item<double>(), t * loss[0].item<double>()) << "bf16 " << bf16;
      auto names = m->named_parameters().keys();
      for (size_t i = 0; i < grads[0].size(); ++i)
        EXPECT_LE(max_rel(grads[1][i], grads[0][i]), t) << names[i] << " bf16 " << bf16 << " grouped " << grouped;
    }
  }
}

struct BreakGuard {
  explicit BreakGuard(const std::string& name) { set_debug_break_fast_path(name); }
  ~BreakGuard() { set_debug_break_fast_path(""); }
};

// A planted break in each CPU kernel path (its output x 1.05) is caught at start-up, named,
// and only that path is switched to its reference; the model then gives the reference loss.
TEST(CpuKernels, APlantedBrokenCpuPathIsCaughtAndSwitchedToItsReference) {
  torch::manual_seed(8);
  auto window = torch::randint(0, preset("tiny")->vocab_size, {2, 17}, torch::kInt64);
  for (const std::string path :
       {"rms_norm.cpu", "add_rms_norm.cpu", "swiglu.cpu", "rope.cpu", "attention.cpu", "cross_entropy.cpu"}) {
    // attention.cpu takes ungrouped heads only. The losses are fp32: the model must route fp32
    // attention to it too (the break must show).
    auto cfg = *preset("tiny");
    if (path == "attention.cpu") cfg.n_kv_heads = cfg.n_heads;
    auto loss_of = [&](Transformer& model) { return model->loss(window).item<float>(); };
    for (auto dt : kDtypes) {
      BreakGuard broken(path);
      Transformer m(cfg), ref(cfg);
      ref->set_cpu_kernels(false);
      const float broken_loss = loss_of(m), want = loss_of(ref);
      EXPECT_GT(std::abs(broken_loss - want), 1e-6 * want) << path << ": the break must show in the model";
      auto r = verify_fast_paths(m, torch::kCPU, dt, 1);
      EXPECT_EQ(r.fell_back, std::vector<std::string>{path}) << r.summary();
      EXPECT_NEAR(loss_of(m), want, 1e-5 * want) << path;
    }
  }
}

}  // namespace
}  // namespace lm::model
