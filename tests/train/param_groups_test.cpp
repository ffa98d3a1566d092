// Parameter groups (train/param_groups.h): lr per group, the embeddings-only first stage, and a
// resume across its boundary (issue 37).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "tests/train/synthetic_source.h"
#include "train/optim.h"
#include "train/param_groups.h"
#include "train/run_setup.h"

namespace lm::train {
namespace {
namespace fs = std::filesystem;

TEST(ParamGroups, NamesFallIntoTheirGroups) {
  EXPECT_EQ(param_group("model.embed_tokens.weight"), ParamGroup::kEmbeddings);
  EXPECT_EQ(param_group("lm_head.weight"), ParamGroup::kHead);
  EXPECT_EQ(param_group("model.norm.weight"), ParamGroup::kNorms);
  EXPECT_EQ(param_group("model.layers.3.input_layernorm.weight"), ParamGroup::kNorms);
  EXPECT_EQ(param_group("model.layers.3.post_attention_layernorm.weight"), ParamGroup::kNorms);
  EXPECT_EQ(param_group("model.layers.0.self_attn.q_proj.bias"), ParamGroup::kBlocks);
  EXPECT_EQ(param_group("model.layers.0.mlp.down_proj.weight"), ParamGroup::kBlocks);
  ParamGroupsConfig c;
  c.embeddings_only_steps = 2;
  c.norms_lr_scale = 0;
  EXPECT_TRUE(trains_at(c, ParamGroup::kEmbeddings, 1));
  EXPECT_TRUE(trains_at(c, ParamGroup::kHead, 1));
  EXPECT_FALSE(trains_at(c, ParamGroup::kBlocks, 1));
  EXPECT_TRUE(trains_at(c, ParamGroup::kBlocks, 2));
  EXPECT_FALSE(trains_at(c, ParamGroup::kNorms, 5)) << "scale 0: frozen for the whole run";
  EXPECT_NE(describe_param_groups(c).find("steps 1-2 train only the embeddings and the head"), std::string::npos) << describe_param_groups(c);
  EXPECT_EQ(describe_param_groups(ParamGroupsConfig{}), "");
}

// After the first stage the blocks and norms ramp in: step N+k (0-based from the stage's end) at
// (k+1)/W of their scale; the embeddings and head keep theirs; a ramp without a stage is refused.
TEST(ParamGroups, RewarmupRampsTheJoiningGroupsIn) {
  ParamGroupsConfig c;
  c.embeddings_only_steps = 3;
  c.rewarmup_steps = 4;
  c.blocks_lr_scale = 0.5;
  EXPECT_DOUBLE_EQ(lr_scale_at(c, ParamGroup::kBlocks, 3), 0.125);
  EXPECT_DOUBLE_EQ(lr_scale_at(c, ParamGroup::kBlocks, 4), 0.25);
  EXPECT_DOUBLE_EQ(lr_scale_at(c, ParamGroup::kNorms, 5), 0.75);
  EXPECT_DOUBLE_EQ(lr_scale_at(c, ParamGroup::kBlocks, 6), 0.5);
  EXPECT_DOUBLE_EQ(lr_scale_at(c, ParamGroup::kBlocks, 100), 0.5);
  EXPECT_DOUBLE_EQ(lr_scale_at(c, ParamGroup::kEmbeddings, 3), 1.0);
  EXPECT_DOUBLE_EQ(lr_scale_at(c, ParamGroup::kHead, 4), 1.0);
  EXPECT_NE(describe_param_groups(c).find("ramped in over 4 steps"), std::string::npos) << describe_param_groups(c);
  TrainConfig tc;
  tc.param_groups.rewarmup_steps = 10;
  auto st = resolve(tc, *model::preset("tiny"));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("train.param_groups.rewarmup_steps"), std::string::npos) << st;
  EXPECT_NE(st.message().find("embeddings_only_steps is 0"), std::string::npos) << st;
}

TEST(ParamGroups, BadValuesNameTheField) {
  TrainConfig tc;
  tc.param_groups.blocks_lr_scale = -1;
  auto st = resolve(tc, *model::preset("tiny"));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("train.param_groups.blocks_lr_scale"), std::string::npos) << st;
  tc.param_groups = {};
  tc.param_groups.embeddings_only_steps = 3;
  tc.param_groups.embeddings_lr_scale = tc.param_groups.head_lr_scale = 0;
  st = resolve(tc, *model::preset("tiny"));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("would train nothing"), std::string::npos) << st;
}

// Each group moves by its own lr: AdamW's first step moves a parameter by lr * g / (|g| + eps),
// so with equal gradients a group at scale 0.25 moves a quarter as far (fp32: ratio within 1e-5).
TEST(ParamGroups, EachGroupStepsAtItsScaledLr) {
  TrainConfig tc;
  tc.optimizer.weight_decay = 0;
  tc.param_groups.blocks_lr_scale = 0.25;
  auto e = torch::ones({4, 3}).requires_grad_(), b = torch::ones({4, 3}).requires_grad_();
  AdamW opt({{"model.embed_tokens.weight", e}, {"model.layers.0.mlp.up_proj.weight", b}}, tc);
  e.mutable_grad() = torch::full({4, 3}, 0.5);
  b.mutable_grad() = torch::full({4, 3}, 0.5);
  opt.step(1e-2);
  const double de = 1.0 - e.detach().max().item<double>(), db = 1.0 - b.detach().max().item<double>();
  EXPECT_NEAR(db / de, 0.25, 1e-5) << de << " " << db;
  // A group without a gradient is not stepped and keeps its own count.
  opt.zero_grad();
  e.mutable_grad() = torch::full({4, 3}, 0.5);
  opt.step(1e-2);
  std::map<std::string, int64_t> steps;
  for (const auto& [n, t] : opt.state())
    if (n.rfind("__step__", 0) == 0) steps[n] = t.item<int64_t>();
  EXPECT_EQ(steps["__step__"], 2);
  EXPECT_EQ(steps["__step__.embeddings"], 2);
  EXPECT_EQ(steps["__step__.blocks"], 1);
  // A state from before the groups (one __step__) gives every group that count.
  model::NamedTensors old;
  for (const auto& [n, t] : opt.state())
    if (n.rfind("__step__.", 0) != 0) old.emplace_back(n, t);
  AdamW back({{"model.embed_tokens.weight", e}, {"model.layers.0.mlp.up_proj.weight", b}}, tc);
  ASSERT_TRUE(back.load_state(old, "old").ok());
  for (const auto& [n, t] : back.state()) {
    if (n.rfind("__step__", 0) == 0) EXPECT_EQ(t.item<int64_t>(), 2) << n;
  }
}

class EmbeddingsOnlyStage : public ::testing::Test {
 protected:
  void SetUp() override {
    init_output(/*quiet=*/true);
    root_ = fs::temp_directory_path() / ("lm_param_groups_test_" + std::to_string(getpid()));
  }
  void TearDown() override { (void)remove_tree(root_.string()); }
  FitRequest request(const std::string& name) const {
    FitRequest r = testing::tiny_request(root_ / name, 6);
    r.model.tie_embeddings = false;  // the head is a group of its own
    r.train.param_groups.embeddings_only_steps = 3;
    r.train.checkpoint.interval = 1;
    r.train.checkpoint.keep_last = 10;
    r.train.logging.interval = 1;
    r.train.logging.mfu_floor = 0;  // a shared CI machine: no throughput warnings in the log
    return r;
  }
  static std::map<std::string, torch::Tensor> weights(const FitRequest& r, int64_t step) {
    auto f = model::load_safetensors(RunFolder(r.run_dir).checkpoint(step) + "/model.safetensors");
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? std::map<std::string, torch::Tensor>(f->tensors.begin(), f->tensors.end())
                  : std::map<std::string, torch::Tensor>{};
  }
  // The weights a fresh run starts from: the trainer draws them from train.seed.
  static std::map<std::string, torch::Tensor> initial(const FitRequest& r) {
    torch::manual_seed(r.train.seed);
    model::Transformer m(r.model, r.train.seed);
    std::map<std::string, torch::Tensor> out;
    for (const auto& [n, t] : model::module_state(*m)) out[n] = t.detach().clone();
    return out;
  }
  fs::path root_;
};

// Steps 1-3 move the embedding and the head only: every block and norm weight keeps its bytes;
// step 4 moves them all. The gradient-flow arbiter ran at the start (the whole model) and passed.
TEST_F(EmbeddingsOnlyStage, FreezesBlocksThenTrainsTheWholeModel) {
  const FitRequest r = request("stage");
  ASSERT_TRUE(r.train.debug.verify_at_start) << "the arbiter runs (a failure would fail the fit)";
  auto s = testing::fit_synthetic(r);
  ASSERT_TRUE(s.ok()) << s.status();
  const auto init = initial(r), w3 = weights(r, 3), w4 = weights(r, 4);
  ASSERT_EQ(init.size(), w3.size());
  for (const auto& [name, t] : init) {
    const ParamGroup g = param_group(name);
    const bool trained = g == ParamGroup::kEmbeddings || g == ParamGroup::kHead;
    EXPECT_EQ(torch::equal(w3.at(name), t), !trained) << name << " after the embeddings-only stage";
    EXPECT_FALSE(torch::equal(w4.at(name), w3.at(name))) << name << " at step 4, the whole model's first";
  }
}

// Stopped inside the first stage (step 2) and at its boundary (step 3), then resumed: the run ends
// bit-identical to the unbroken one, weights and AdamW state (the per-group step counts too).
TEST_F(EmbeddingsOnlyStage, ResumeAcrossTheBoundaryIsBitIdentical) {
  const FitRequest ref = request("ref");
  ASSERT_TRUE(testing::fit_synthetic(ref).ok());
  for (int64_t stop : {2, 3}) {
    FitRequest r = request("stop" + std::to_string(stop));
    r.train.stop_at_step = stop;
    ASSERT_TRUE(testing::fit_synthetic(r).ok());
    r.train.stop_at_step = -1;
    r.resume = true;
    auto s = testing::fit_synthetic(r);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->start_step, stop);
    for (const char* f : {"/model.safetensors", "/optimizer.safetensors"})
      EXPECT_TRUE(*read_file(RunFolder(r.run_dir).checkpoint(6) + f) == *read_file(RunFolder(ref.run_dir).checkpoint(6) + f))
          << f << " differs after a stop at step " << stop;
  }
}

// With rewarmup_steps 4 the blocks' first update (step 4) is a quarter of the one without: the
// weights and gradients at step 3 are the same in both runs, and AdamW's update and its decoupled
// decay are both linear in the lr. A resume inside the ramp (stopped at step 4) ends bit-identical.
TEST_F(EmbeddingsOnlyStage, RewarmupRampsTheBlocksInAndResumesExactly) {
  const FitRequest plain = request("plain");
  FitRequest ramp = request("ramp");
  ramp.train.param_groups.rewarmup_steps = 4;
  ASSERT_TRUE(testing::fit_synthetic(plain).ok());
  ASSERT_TRUE(testing::fit_synthetic(ramp).ok());
  const auto p3 = weights(plain, 3), p4 = weights(plain, 4), r3 = weights(ramp, 3), r4 = weights(ramp, 4);
  int blocks = 0;
  for (const auto& [name, t] : p3) {
    ASSERT_TRUE(torch::equal(t, r3.at(name))) << name << ": the stage is the same in both runs";
    if (param_group(name) != ParamGroup::kBlocks) continue;
    const double dp = (p4.at(name) - t).abs().max().item<double>(), dr = (r4.at(name) - t).abs().max().item<double>();
    EXPECT_NEAR(dr / dp, 0.25, 2e-3) << name << ": " << dr << " vs " << dp;
    ++blocks;
  }
  EXPECT_GT(blocks, 4);
  FitRequest r = request("ramp_stop");
  r.train.param_groups.rewarmup_steps = 4;
  r.train.stop_at_step = 4;
  ASSERT_TRUE(testing::fit_synthetic(r).ok());
  r.train.stop_at_step = -1;
  r.resume = true;
  ASSERT_TRUE(testing::fit_synthetic(r).ok());
  for (const char* f : {"/model.safetensors", "/optimizer.safetensors"})
    EXPECT_TRUE(*read_file(RunFolder(r.run_dir).checkpoint(6) + f) == *read_file(RunFolder(ramp.run_dir).checkpoint(6) + f))
        << f << " differs after a stop inside the ramp";
}

// A group at lr scale 0 never moves, and the start-up arbiter does not fail on it.
TEST_F(EmbeddingsOnlyStage, ScaleZeroFreezesAGroupForTheWholeRun) {
  FitRequest r = request("norms0");
  r.train.param_groups.embeddings_only_steps = 0;
  r.train.param_groups.norms_lr_scale = 0;
  ASSERT_TRUE(r.train.debug.verify_at_start);
  auto s = testing::fit_synthetic(r);
  ASSERT_TRUE(s.ok()) << s.status();
  const auto init = initial(r), w6 = weights(r, 6);
  for (const auto& [name, t] : init)
    EXPECT_EQ(torch::equal(w6.at(name), t), param_group(name) == ParamGroup::kNorms) << name;
  // Frozen means no update at all, not an update at lr 0: the norms' AdamW moments stay zero.
  auto opt = model::load_safetensors(RunFolder(r.run_dir).checkpoint(6) + "/optimizer.safetensors");
  ASSERT_TRUE(opt.ok()) << opt.status();
  for (const auto& [name, t] : opt->tensors) {
    if (name.size() < 8 || name.compare(name.size() - 8, 8, ".exp_avg") != 0) continue;
    const std::string param = name.substr(0, name.size() - 8);
    EXPECT_EQ(t.abs().max().item<double>() == 0, param_group(param) == ParamGroup::kNorms) << name;
  }
}

TEST(ReplayWarning, ExtendedCheckpointWithoutEnglishIsWarned) {
  const fs::path dir = fs::temp_directory_path() / ("lm_replay_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  EXPECT_EQ(replay_warning(dir.string(), {{"bn", 1.0}}), "") << "not extended: no extension.json";
  ASSERT_TRUE(write_file_atomic((dir / "extension.json").string(), "{}").ok());
  const std::string w = replay_warning(dir.string(), {{"bn", 1.0}});
  EXPECT_NE(w.find("no English (bn 100%)"), std::string::npos) << w;
  EXPECT_EQ(replay_warning(dir.string(), {{"bn", 0.75}, {"en", 0.25}}), "");
  EXPECT_EQ(replay_warning("", {{"bn", 1.0}}), "");
  (void)remove_tree(dir.string());
}

}  // namespace
}  // namespace lm::train
