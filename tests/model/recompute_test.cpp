// Activation recompute per block (model/recompute.h): the gradients of a step with it are
// bit-identical to the step without it, in fp32 and under bf16 autocast, in both block loops
// (the regrouped add + norm one and the plain one), over accumulated micro-batches; each
// parameter's gradient hook fires once per backward. What it saves: tests/train/plan_memory_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>

#include <map>
#include <string>

#include "model/config.h"
#include "model/recompute.h"
#include "model/transformer.h"

namespace lm::model {
namespace {

ModelConfig shape() {
  ModelConfig c = *preset("tiny");
  c.n_kv_heads = c.n_heads / 2;  // grouped-query: the kv path is recomputed too
  return c;
}

// Loss and gradients of two accumulated micro-batches, with autocast held across both as the
// trainer holds it (its cache of bf16 weight copies then spans the step).
struct Step {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
  std::map<std::string, int> hook_calls;
};

Step run_step(bool recompute_on, bool bf16, bool add_norm) {
  Transformer m(shape(), 7);
  m->set_recompute(recompute_on);
  m->set_cpu_add_norm(add_norm);
  Step s;
  for (auto& p : m->named_parameters()) {
    const std::string name = p.key();
    p.value().register_hook([&s, name](const torch::Tensor&) { ++s.hook_calls[name]; });
  }
  torch::manual_seed(3);
  auto windows = torch::randint(shape().vocab_size, {2, 3, 33}, torch::kInt64);
  at::autocast::set_autocast_enabled(at::kCPU, bf16);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  for (int micro = 0; micro < 2; ++micro) {
    auto loss = m->loss(windows[micro]) / 2.0;
    loss.backward();
    s.loss += loss.item<double>();
  }
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  for (auto& p : m->named_parameters()) s.grads[p.key()] = p.value().grad().clone();
  return s;
}

TEST(Recompute, GradientsAreBitIdenticalAndEachHookFiresOncePerBackward) {
  for (const bool bf16 : {false, true})
    for (const bool add_norm : {true, false}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16 autocast" : "fp32") + (add_norm ? ", add+norm loop" : ", plain loop"));
      const Step plain = run_step(false, bf16, add_norm), again = run_step(true, bf16, add_norm);
      EXPECT_EQ(plain.loss, again.loss);
      ASSERT_EQ(plain.grads.size(), again.grads.size());
      for (const auto& [name, g] : plain.grads) {
        ASSERT_TRUE(again.grads.at(name).defined()) << name << ": no gradient with recompute";
        EXPECT_TRUE(torch::equal(g, again.grads.at(name)))
            << name << ": max |diff| " << (g - again.grads.at(name)).abs().max().item<double>();
        EXPECT_EQ(again.hook_calls.at(name), plain.hook_calls.at(name)) << name;
        // Once per backward (two micro-batches), the tied embedding too: autograd sums its lookup's and
        // its head's gradients before the hook.
        EXPECT_EQ(again.hook_calls.at(name), 2) << name;
      }
    }
}

TEST(Recompute, WithoutGradModeItIsThePlainForward) {
  Transformer a(shape(), 7), b(shape(), 7);
  b->set_recompute(true);
  auto window = torch::randint(shape().vocab_size, {2, 17}, torch::kInt64);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(a->forward(window), b->forward(window)));
}

}  // namespace
}  // namespace lm::model
