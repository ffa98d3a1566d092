#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "core/file.h"
#include "core/log.h"
#include "model/safetensors.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/optim.h"
#include "train/trainer.h"
#include "tests/train/synthetic_source.h"

namespace lm::train {
namespace {
namespace fs = std::filesystem;

using testing::SyntheticSource;

fs::path temp_run(const std::string& name) {
  auto p = fs::temp_directory_path() / ("lm_train_test_" + std::to_string(getpid())) / name;
  fs::remove_all(p);
  return p;
}

using testing::tiny_request;
const auto run_fit = testing::fit_synthetic;

std::vector<torch::Tensor> weights_of(const std::string& ckpt) {
  auto f = model::load_safetensors(ckpt + "/model.safetensors");
  EXPECT_TRUE(f.ok()) << f.status();
  std::vector<torch::Tensor> out;
  for (auto& [n, t] : f->tensors) out.push_back(t);
  return out;
}

class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override { init_output(/*quiet=*/true); }
};

TEST_F(TrainTest, LearningRateSchedules) {
  TrainConfig c;
  c.optimizer.lr = 1.0; c.steps = 110; c.schedule.warmup_steps = 10; c.schedule.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.1);   // warmup is linear from lr/warmup
  EXPECT_DOUBLE_EQ(lr_at(c, 9), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 10), 1.0);  // cosine starts at the peak
  EXPECT_NEAR(lr_at(c, 10 + 99 / 2.0), 0.55, 0.01);  // half way: (1 + 0.1) / 2
  EXPECT_DOUBLE_EQ(lr_at(c, 109), 0.1);  // ends at min_lr
  c.schedule.kind = "wsd"; c.schedule.decay_fraction = 0.2;  // decay over the last 22 steps
  EXPECT_DOUBLE_EQ(lr_at(c, 50), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 87), 1.0);
  EXPECT_NEAR(lr_at(c, 98), 1.0 - 0.9 * 11.0 / 22.0, 1e-12);
  EXPECT_DOUBLE_EQ(lr_at(c, 109), 0.1);
  c.schedule.kind = "constant";
  EXPECT_DOUBLE_EQ(lr_at(c, 100), 1.0);
}

TEST_F(TrainTest, ConfigErrorsNameTheField) {
  TrainConfig c;
  c.batch.micro_batch = -4;
  auto st = resolve(c, *model::preset("tiny"));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("train.batch.micro_batch: must be positive, got -4"), std::string::npos);
  TrainConfig d;
  d.batch.batch_tokens = 1000;  // not a multiple of 8*128
  EXPECT_FALSE(resolve(d, *model::preset("tiny")).ok());
  d.batch.batch_tokens = 8 * 128 * 4;
  ASSERT_TRUE(resolve(d, *model::preset("tiny")).ok());
  EXPECT_EQ(d.batch.grad_accum, 4);
  TrainConfig e;
  e.tokens = 10000;  // 10000 / 1024 tokens per step -> 10 steps
  ASSERT_TRUE(resolve(e, *model::preset("tiny")).ok());
  EXPECT_EQ(e.steps, 10);
  // Products that overflow int64 are errors, not undefined behaviour (fuzz_config input
  // tests/fuzz/corpus/fuzz_config/crash-tokens-per-step-overflow).
  TrainConfig f;
  f.tokens = 2000000;
  f.batch.grad_accum = 88888888883888883;
  auto sf = resolve(f, *model::preset("tiny"));
  ASSERT_FALSE(sf.ok());
  EXPECT_NE(std::string(sf.message()).find("train.batch.grad_accum: 88888888883888883 micro-batches"), std::string::npos) << sf;
  TrainConfig g;
  g.batch.micro_batch = int64_t{1} << 60;
  auto sg = resolve(g, *model::preset("tiny"));
  ASSERT_FALSE(sg.ok());
  EXPECT_NE(std::string(sg.message()).find("overflow a 64-bit count"), std::string::npos) << sg;
  TrainConfig h;
  h.tokens = std::numeric_limits<int64_t>::max();  // ceil division without overflow
  ASSERT_TRUE(resolve(h, *model::preset("tiny")).ok());
  EXPECT_EQ(h.steps, std::numeric_limits<int64_t>::max() / 1024 + 1);
}

TEST_F(TrainTest, WeightDecaySkipsNormsAndEmbeddings) {
  model::Transformer m(*model::preset("tiny"));
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (auto& p : m->named_parameters()) params.emplace_back(p.key(), p.value());
  TrainConfig c;
  AdamW opt(params, c);
  for (const auto& n : opt.decayed()) {
    EXPECT_EQ(n.find("norm"), std::string::npos) << n;
    EXPECT_EQ(n.find("embed_tokens"), std::string::npos) << n;
  }
  EXPECT_EQ(opt.decayed().size(), 14u);      // 7 matrices per layer
  EXPECT_EQ(opt.not_decayed().size(), 6u);   // 2 norms per layer, final norm, embedding
  // Behaviour, not only bookkeeping: with zero gradients only decayed weights move.
  for (auto& [n, p] : params) p.mutable_grad() = torch::zeros_like(p);
  auto norm_before = m->model->norm->weight.clone();
  auto q_before = m->model->layers[0]->as<model::BlockImpl>()->self_attn->q_proj->weight.clone();
  opt.step(0.5);
  EXPECT_TRUE(torch::equal(norm_before, m->model->norm->weight));
  EXPECT_FALSE(torch::equal(q_before, m->model->layers[0]->as<model::BlockImpl>()->self_attn->q_proj->weight));
}

TEST_F(TrainTest, AdamWMatchesClosedFormFirstStep) {
  // After one step from zero moments, Adam moves each weight by lr * g/(|g| + eps') = lr*sign(g).
  auto p = torch::tensor({1.0f, -2.0f, 3.0f}).requires_grad_(true);
  p.mutable_grad() = torch::tensor({0.5f, -0.25f, 2.0f});
  TrainConfig c;
  c.optimizer.weight_decay = 0;
  AdamW opt({{"w", p}}, c);
  opt.step(0.1);
  auto want = torch::tensor({0.9f, -1.9f, 2.9f});
  EXPECT_TRUE(torch::allclose(p.detach(), want, 0, 1e-6)) << p;
}

TEST_F(TrainTest, AccumulationEqualsOneLargerBatch) {
  // 4 micro-batches of 2 rows vs 1 batch of 8 rows, same rows in the same order.
  auto a = tiny_request(temp_run("accum_a"), 3);
  a.train.batch.micro_batch = 2; a.train.batch.grad_accum = 4;
  auto b = tiny_request(temp_run("accum_b"), 3);
  b.train.batch.micro_batch = 8; b.train.batch.grad_accum = 1;
  auto sa = run_fit(a);
  auto sb = run_fit(b);
  ASSERT_TRUE(sa.ok()) << sa.status();
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto wa = weights_of(sa->checkpoint), wb = weights_of(sb->checkpoint);
  ASSERT_EQ(wa.size(), wb.size());
  // fp32: the mean over 8 rows is summed in another order; after 3 Adam steps the
  // difference stays at rounding level (~1e-6 relative). Adam normalises the update, so a
  // wrong scaling (e.g. a missing 1/k) would still show as a loss difference, checked too.
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(torch::allclose(wa[i], wb[i], 1e-4, 1e-5)) << i;
  for (size_t i = 0; i < sa->losses.size(); ++i) EXPECT_NEAR(sa->losses[i], sb->losses[i], 1e-5);
}

TEST_F(TrainTest, ResumeIsBitIdentical) {
  auto full = tiny_request(temp_run("full"), 40);
  auto sf = run_fit(full);
  ASSERT_TRUE(sf.ok()) << sf.status();
  EXPECT_LT(sf->losses.back(), sf->losses.front());  // it learns

  auto part = tiny_request(temp_run("part"), 40);
  part.train.stop_at_step = 23;  // not on a checkpoint interval: the stop writes its own
  auto s1 = run_fit(part);
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(s1->steps, 23);
  part.resume = true;
  auto s2 = run_fit(part);
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ(s2->start_step, 23);
  EXPECT_EQ(s2->steps, 40);
  std::vector<double> joined = s1->losses;
  joined.insert(joined.end(), s2->losses.begin(), s2->losses.end());
  ASSERT_EQ(joined.size(), sf->losses.size());
  for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], sf->losses[i]) << "step " << i + 1;
  auto wf = weights_of(sf->checkpoint), wr = weights_of(s2->checkpoint);
  for (size_t i = 0; i < wf.size(); ++i) EXPECT_TRUE(torch::equal(wf[i], wr[i])) << i;
  // metrics.jsonl of the resumed run equals the uninterrupted one in steps and losses.
  auto ma = read_file(full.run_dir + "/metrics.jsonl"), mb = read_file(part.run_dir + "/metrics.jsonl");
  ASSERT_TRUE(ma.ok() && mb.ok());
  auto losses_of = [](const std::string& text) {
    std::vector<double> v;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) v.push_back(Json::parse(line)["loss"].get<double>());
    return v;
  };
  EXPECT_EQ(losses_of(*ma), losses_of(*mb));
}

TEST_F(TrainTest, RecomputeTrainsBitIdentically) {
  // Activation recompute per block (train.hardware.recompute) through the whole trainer: the start-up
  // checks, accumulation, clipping and AdamW give the same losses and weights, in fp32 and bf16.
  for (const char* dtype : {"fp32", "bf16"}) {
    SCOPED_TRACE(dtype);
    auto a = tiny_request(temp_run(std::string("rc_off_") + dtype), 6);
    auto b = tiny_request(temp_run(std::string("rc_on_") + dtype), 6);
    for (auto* r : {&a, &b}) {
      r->train.batch.grad_accum = 2;
      r->train.hardware.dtype = dtype;
    }
    b.train.hardware.recompute = true;
    auto sa = run_fit(a), sb = run_fit(b);
    ASSERT_TRUE(sa.ok()) << sa.status();
    ASSERT_TRUE(sb.ok()) << sb.status();
    ASSERT_EQ(sa->losses.size(), sb->losses.size());
    for (size_t i = 0; i < sa->losses.size(); ++i) EXPECT_EQ(sa->losses[i], sb->losses[i]) << "step " << i + 1;
    auto wa = weights_of(sa->checkpoint), wb = weights_of(sb->checkpoint);
    ASSERT_EQ(wa.size(), wb.size());
    for (size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(torch::equal(wa[i], wb[i])) << i;
  }
}

TEST_F(TrainTest, KeepLastK) {
  auto r = tiny_request(temp_run("keep"), 40);
  r.train.checkpoint.interval = 5;
  r.train.checkpoint.keep_last = 2;
  ASSERT_TRUE(run_fit(r).ok());
  int n = 0;
  for (auto& e : fs::directory_iterator(r.run_dir + "/checkpoints")) { (void)e; ++n; }
  EXPECT_EQ(n, 2);
  auto latest = latest_checkpoint(r.run_dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_NE(latest->find("step-00000040"), std::string::npos);
}

TEST_F(TrainTest, NaNStopsWithLastCheckpointIntact) {
  auto r = tiny_request(temp_run("nan"), 30);
  r.train.debug.inject_nan_step = 14;  // 0-based: the 15th step, after the step-10 checkpoint
  auto s = run_fit(r);
  ASSERT_FALSE(s.ok());
  const std::string msg(s.status().message());
  EXPECT_NE(msg.find("step 15: non-finite gradient"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step-00000010"), std::string::npos) << msg;
  auto ck = find_checkpoint(r.run_dir, -1);
  ASSERT_TRUE(ck.ok()) << ck.status();
  model::Transformer m(r.model);
  EXPECT_TRUE(load_model(*ck, m).ok());
  // And the run resumes from it (with the fault gone).
  r.train.debug.inject_nan_step = -1;
  r.resume = true;
  auto again = run_fit(r);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->start_step, 10);
}

TEST_F(TrainTest, NaNInTheLossStopsNamingStepAndParameter) {
  auto r = tiny_request(temp_run("nan_loss"), 30);
  r.train.debug.inject_nan_step = 14;
  r.train.debug.inject_nan_in = "loss";
  auto s = run_fit(r);
  ASSERT_FALSE(s.ok());
  const std::string msg(s.status().message());
  EXPECT_NE(msg.find("step 15: non-finite loss"), std::string::npos) << msg;
  EXPECT_NE(msg.find("first bad parameter: model."), std::string::npos) << msg;
  EXPECT_NE(msg.find("step-00000010"), std::string::npos) << msg;
}

std::vector<Json> metrics_lines(const std::string& run_dir) {
  std::vector<Json> v;
  std::istringstream in(*read_file(run_dir + "/metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) v.push_back(Json::parse(line));
  return v;
}

TEST_F(TrainTest, NaNSkipLeavesWeightsAsBeforeCountsAndContinues) {
  // Steps 15 and 16 (1-based) get a NaN gradient; with train.nan_skip_limit 2 both are skipped.
  auto a = tiny_request(temp_run("skip_a"), 30);
  a.train.debug.inject_nan_step = 14;
  a.train.debug.inject_nan_steps = 2;
  a.train.nan_skip_limit = 2;
  a.train.stop_at_step = 16;
  auto sa = run_fit(a);
  ASSERT_TRUE(sa.ok()) << sa.status();
  EXPECT_EQ(sa->nan_skipped, 2);
  // A skipped step applies nothing: weights and optimizer state after step 16 equal those after
  // step 14 of a run without the fault (bit for bit: same data and arithmetic up to step 14).
  auto b = tiny_request(temp_run("skip_b"), 30);
  b.train.stop_at_step = 14;
  auto sb = run_fit(b);
  ASSERT_TRUE(sb.ok()) << sb.status();
  for (const char* f : {"/model.safetensors", "/optimizer.safetensors"})
    EXPECT_EQ(*read_file(sa->checkpoint + f), *read_file(sb->checkpoint + f)) << f;
  // Logged: a metrics line for each skipped step naming the parameter, the count from then on.
  int skipped_lines = 0;
  for (const auto& m : metrics_lines(a.run_dir)) {
    const int64_t step = m["step"].get<int64_t>();
    if (step == 15 || step == 16) {
      EXPECT_EQ(m.value("skipped", std::string()), "model.layers.0.mlp.down_proj.weight") << m.dump();
      EXPECT_EQ(m.value("nan_skipped", int64_t{0}), step - 14) << m.dump();
      ++skipped_lines;
    } else {
      EXPECT_FALSE(m.contains("skipped")) << m.dump();
    }
  }
  EXPECT_EQ(skipped_lines, 2);
  // And the run goes on to the end.
  a.resume = true;
  a.train.stop_at_step = -1;
  auto rest = run_fit(a);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->steps, 30);
  EXPECT_EQ(rest->nan_skipped, 2);
  EXPECT_TRUE(std::isfinite(rest->final_loss));
}

TEST_F(TrainTest, NaNSkipStopsOnceTheLimitIsSpent) {
  auto r = tiny_request(temp_run("skip_limit"), 30);
  r.train.debug.inject_nan_step = 14;
  r.train.debug.inject_nan_steps = 2;
  r.train.nan_skip_limit = 1;
  auto s = run_fit(r);
  ASSERT_FALSE(s.ok());
  const std::string msg(s.status().message());
  EXPECT_NE(msg.find("step 16: non-finite gradient"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 earlier steps skipped, train.nan_skip_limit is 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step-00000010"), std::string::npos) << msg;
}

TEST_F(TrainTest, NaNSkipCountIsInTheCheckpoint) {
  // Stop right after the first skip: the resumed run must know the one skip is spent.
  auto r = tiny_request(temp_run("skip_resume_limit"), 30);
  r.train.debug.inject_nan_step = 14;
  r.train.debug.inject_nan_steps = 2;
  r.train.nan_skip_limit = 1;
  r.train.stop_at_step = 15;
  auto s1 = run_fit(r);
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(s1->nan_skipped, 1);
  auto state = read_trainer_state(*latest_checkpoint(r.run_dir));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ((*state)["nan_skipped"], 1);
  r.resume = true;
  r.train.stop_at_step = -1;
  auto s2 = run_fit(r);
  ASSERT_FALSE(s2.ok()) << "the second NaN must exceed the limit of 1 after resume";
  EXPECT_NE(std::string(s2.status().message()).find("step 16: non-finite"), std::string::npos) << s2.status();
}

TEST_F(TrainTest, NaNSkipResumeIsBitIdentical) {
  auto full = tiny_request(temp_run("skip_full"), 30);
  full.train.debug.inject_nan_step = 14;
  full.train.debug.inject_nan_steps = 2;
  full.train.nan_skip_limit = 3;
  auto sf = run_fit(full);
  ASSERT_TRUE(sf.ok()) << sf.status();
  auto part = full;
  part.run_dir = temp_run("skip_part").string();
  part.train.stop_at_step = 15;  // between the two skipped steps
  auto s1 = run_fit(part);
  ASSERT_TRUE(s1.ok()) << s1.status();
  part.resume = true;
  part.train.stop_at_step = -1;
  auto s2 = run_fit(part);
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ(s2->nan_skipped, sf->nan_skipped);
  EXPECT_EQ(sf->nan_skipped, 2);
  std::vector<double> joined = s1->losses;
  joined.insert(joined.end(), s2->losses.begin(), s2->losses.end());
  ASSERT_EQ(joined.size(), sf->losses.size());
  for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], sf->losses[i]) << "step " << i + 1;
  for (const char* f : {"/model.safetensors", "/optimizer.safetensors"})
    EXPECT_EQ(*read_file(sf->checkpoint + f), *read_file(s2->checkpoint + f)) << f;
}

TEST_F(TrainTest, ResavingTheLatestStepLeavesItInPlace) {
  // A signal right after a periodic checkpoint saves the same step again: the folder `latest`
  // names must not be deleted and rewritten (a kill in between would leave no checkpoint).
  auto r = tiny_request(temp_run("resave"), 10);
  auto s = run_fit(r);
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string before = *read_file(s->checkpoint + "/model.safetensors");
  model::Transformer m(r.model);
  m->init_weights(99);
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (auto& p : m->named_parameters()) params.emplace_back(p.key(), p.value());
  AdamW opt(params, r.train);
  ASSERT_TRUE(save_checkpoint(r.run_dir, 10, m, opt, Json{{"step", 10}}, 3).ok());
  EXPECT_EQ(*read_file(s->checkpoint + "/model.safetensors"), before);
  ASSERT_TRUE(save_checkpoint(r.run_dir, 11, m, opt, Json{{"step", 11}}, 3).ok());  // a new step as usual
  EXPECT_EQ(*latest_checkpoint(r.run_dir), r.run_dir + "/checkpoints/step-00000011");
  EXPECT_NE(*read_file(r.run_dir + "/checkpoints/step-00000011/model.safetensors"), before);
}

// Checkpoints by wall-clock minutes (train.checkpoint.minutes): they happen without a step
// interval, and a resume from one is exact (bit-identical to the uninterrupted run).
TEST_F(TrainTest, TimeBasedCheckpointResumesExactly) {
  auto full = tiny_request(temp_run("time_full"), 30);
  full.train.checkpoint.interval = 0;
  auto sf = run_fit(full);
  ASSERT_TRUE(sf.ok()) << sf.status();
  auto steps_saved = [](const std::string& run) {
    std::vector<std::string> v;
    for (auto& e : fs::directory_iterator(run + "/checkpoints")) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(steps_saved(full.run_dir), std::vector<std::string>{"step-00000030"});  // no period: only the last

  auto timed = tiny_request(temp_run("time_ckpt"), 30);
  timed.train.checkpoint.interval = 0;
  timed.train.checkpoint.minutes = 1e-9;  // due after every step (rank 0's clock)
  timed.train.checkpoint.keep_last = 100;
  auto st = run_fit(timed);
  ASSERT_TRUE(st.ok()) << st.status();
  const auto saved = steps_saved(timed.run_dir);
  EXPECT_GE(saved.size(), 25u) << "time-based checkpoints were not written";
  ASSERT_TRUE(fs::exists(timed.run_dir + "/checkpoints/step-00000017/trainer.json"));

  // Resume from the time-based checkpoint of step 17 (as if the run had been killed after it: no
  // later checkpoint; a resume takes the newest that verifies, issue 40).
  for (const auto& name : saved)
    if (name > "step-00000017") fs::remove_all(timed.run_dir + "/checkpoints/" + name);
  ASSERT_TRUE(write_file_atomic(timed.run_dir + "/latest", "step-00000017\n").ok());
  timed.resume = true;
  auto sr = run_fit(timed);
  ASSERT_TRUE(sr.ok()) << sr.status();
  EXPECT_EQ(sr->start_step, 17);
  for (size_t i = 0; i < sr->losses.size(); ++i) EXPECT_EQ(sr->losses[i], sf->losses[17 + i]) << "step " << 18 + i;
  auto wf = weights_of(sf->checkpoint), wr = weights_of(sr->checkpoint);
  ASSERT_EQ(wf.size(), wr.size());
  for (size_t i = 0; i < wf.size(); ++i) EXPECT_TRUE(torch::equal(wf[i], wr[i])) << i;
}

#ifndef LM_ASSERT_OK
#define LM_ASSERT_OK(expr)                  \
  do {                                      \
    const absl::Status lm_st_ = (expr);     \
    ASSERT_TRUE(lm_st_.ok()) << lm_st_;     \
  } while (0)
#endif
#define LM_EXPECT_OK(expr) EXPECT_TRUE((expr).ok())

// The background writer saves the state of the step it was given, even when training changes the
// weights right after start() (the snapshot is a copy); writes never overlap; errors come back.
TEST_F(TrainTest, BackgroundCheckpointWriterSavesTheSnapshot) {
  const fs::path run = temp_run("writer");
  fs::create_directories(run);
  auto r = tiny_request(run, 1);
  model::Transformer m(r.model);
  m->init_weights(7);
  model::NamedTensors params;
  for (auto& p : m->named_parameters()) params.emplace_back(p.key(), p.value());
  AdamW opt(params, r.train);
  const std::string expected = model::encode_safetensors(model::module_state(*m), {{"format", "pt"}});
  CheckpointWriter writer(run.string(), 3);
  LM_ASSERT_OK(writer.start(snapshot_checkpoint(5, m, opt, Json{{"step", 5}})));
  {
    torch::NoGradGuard no_grad;
    for (auto& [n, p] : params) p.fill_(0.5);  // the next step changes the weights in place
  }
  LM_ASSERT_OK(writer.start(snapshot_checkpoint(6, m, opt, Json{{"step", 6}})));  // waits for step 5
  LM_ASSERT_OK(writer.wait());
  EXPECT_FALSE(writer.busy());
  // EXPECT_TRUE, not EXPECT_EQ: a failure would print the whole file.
  EXPECT_TRUE(*read_file(run.string() + "/checkpoints/step-00000005/model.safetensors") == expected)
      << "step 5's file is not the state at start(): the snapshot shares the training tensors";
  EXPECT_TRUE(*read_file(run.string() + "/checkpoints/step-00000006/model.safetensors") != expected);
  EXPECT_EQ(*latest_checkpoint(run.string()), run.string() + "/checkpoints/step-00000006");

  // A write that fails (the checkpoints folder is a file) reports from wait(), naming the step.
  const fs::path bad = temp_run("writer_bad");
  fs::create_directories(bad);
  ASSERT_TRUE(write_file_atomic((bad / "checkpoints").string(), "not a folder").ok());
  CheckpointWriter failing(bad.string(), 3);
  LM_ASSERT_OK(failing.start(snapshot_checkpoint(1, m, opt, Json{{"step", 1}})));
  const absl::Status st = failing.wait();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("step-00000001"), std::string::npos) << st;
  LM_EXPECT_OK(failing.wait());  // reported once
}

TEST_F(TrainTest, ResumeRefusesOtherConfigTokenizerOrLayout) {
  auto r = tiny_request(temp_run("refuse"), 10);
  ASSERT_TRUE(run_fit(r).ok());
  auto other = r;
  other.resume = true;
  other.model.d_ff = 128;
  auto s = run_fit(other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("another model config"), std::string::npos) << s.status();
  other = r;
  other.resume = true;
  other.tokenizer_hash = "different";
  s = run_fit(other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("tokenizer"), std::string::npos) << s.status();
  other = r;
  other.resume = true;
  other.world_size = 2;  // 2 ranks x 4 rows: twice the run's rows per step (4 x 1 rank)
  s = run_fit(other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("the run took 4 rows per step"), std::string::npos) << s.status();
  // Existing run without --resume or --force.
  s = run_fit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(TrainTest, CorruptCheckpointIsAClearError) {
  auto r = tiny_request(temp_run("corrupt"), 10);
  ASSERT_TRUE(run_fit(r).ok());
  auto ck = *latest_checkpoint(r.run_dir);
  auto bytes = *read_file(ck + "/model.safetensors");
  ASSERT_TRUE(write_file_atomic(ck + "/model.safetensors", bytes.substr(0, bytes.size() / 2)).ok());
  r.resume = true;
  auto s = run_fit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
  EXPECT_NE(std::string(s.status().message()).find("model.safetensors: " + std::to_string(bytes.size() / 2) + " bytes"),
            std::string::npos) << s.status();
  ASSERT_TRUE(write_file_atomic(ck + "/model.safetensors", bytes).ok());  // the model intact again, trainer.json gone
  fs::remove(ck + "/trainer.json");
  s = run_fit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("missing trainer.json"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace lm::train
