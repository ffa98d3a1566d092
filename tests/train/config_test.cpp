// The nested training config (issue 19, item 4): sections read and written strictly, a flat
// config refused with where its keys moved, and one override mechanism (`--set` by dotted key,
// the short flags as aliases of it) that resume checks like any other change.
#include <gtest/gtest.h>

#include <algorithm>

#include <CLI/CLI.hpp>

#include "absl/strings/str_replace.h"

#include "app/fit_flags.h"
#include "core/config.h"
#include "model/config.h"
#include "train/config.h"
#include "train/resume.h"

namespace lm::train {
namespace {

bool has(const absl::Status& st, const std::string& needle) {
  return std::string(st.message()).find(needle) != std::string::npos;
}

// The flags of `lmtrain fit` (app/fit_flags.h) parsed from `args` and applied to `base`.
absl::StatusOr<TrainConfig> with_flags(std::vector<std::string> args, TrainConfig base,
                                       TrainOverrides* out = nullptr) {
  CLI::App app("fit");
  TrainOverrides flags;
  app::add_train_flags(&app, flags);
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  LM_RETURN_IF_ERROR(flags.apply(base));
  if (out != nullptr) *out = flags;
  return base;
}

// Each field of each section, changed from its default, survives to_json -> from_json; the
// sections are the ones docs/architecture.md lists.
TEST(TrainConfigSections, EveryFieldOfEverySectionRoundTrips) {
  const Json defaults = to_json(TrainConfig{});
  std::vector<std::string> sections;
  for (auto it = defaults.begin(); it != defaults.end(); ++it)
    if (it->is_object()) sections.push_back(it.key());
  EXPECT_EQ(sections, (std::vector<std::string>{"batch", "checkpoint", "debug", "distributed", "eval", "hardware",
                                                "logging", "optimizer", "param_groups", "schedule"}));
  const std::vector<std::string> keys = dotted_keys(defaults);
  ASSERT_GE(keys.size(), 39u) << "every field of the flat config has a place";
  for (const std::string& key : keys) {
    SCOPED_TRACE(key);
    Json j = defaults;
    const Json::json_pointer at("/" + absl::StrReplaceAll(key, {{".", "/"}}));
    Json& v = j[at];
    if (v.is_array()) v.push_back("x");  // eval.sample_prompts
    else if (v.is_boolean()) v = !v.get<bool>();
    else if (v.is_string()) v = v.get<std::string>() + "-x";
    else if (v.is_number_unsigned()) v = v.get<uint64_t>() + 7;
    else if (v.is_number_integer()) v = v.get<int64_t>() + 7;
    else v = v.get<double>() + 0.25;
    TrainConfig back;
    ASSERT_TRUE(from_json(j, back, "train").ok());
    EXPECT_EQ(to_json(back), j);
    EXPECT_NE(to_json(back)[at], defaults[at]);
  }
}

TEST(TrainConfigSections, UnknownDottedKeyNamesThePathAndTheNearestKey) {
  TrainConfig c;
  auto st = from_json(Json::parse(R"({"optimizer": {"lrr": 0.1}})"), c, "train");
  EXPECT_TRUE(has(st, "train.optimizer.lrr: unknown key")) << st;
  EXPECT_TRUE(has(st, "did you mean 'lr'?")) << st;
  st = from_json(Json::parse(R"({"stepz": 3})"), c, "train");
  EXPECT_TRUE(has(st, "train.stepz: unknown key (did you mean 'steps'?")) << st;
  // On the command line the whole dotted key is compared: a bare field name finds its section.
  st = set_dotted(c, "lr", "0.1", "train");
  EXPECT_TRUE(has(st, "train.lr: unknown key (did you mean 'optimizer.lr'?)")) << st;
  st = set_dotted(c, "schedule.knd", "wsd", "train");
  EXPECT_TRUE(has(st, "did you mean 'schedule.kind'?")) << st;
  st = set_dotted(c, "optimizer", "1", "train");
  EXPECT_TRUE(has(st, "train.optimizer: a section, not a field; set one of train.optimizer.beta1")) << st;
  EXPECT_TRUE(has(st, "train.optimizer.lr,")) << st;
}

TEST(TrainConfigSections, AFlatConfigIsRefusedWithWhereEachKeyMoved) {
  const Json flat = Json::parse(
      R"({"steps": 12, "lr": 0.001, "micro_batch": 4, "schedule": "wsd", "log_interval": 1, "ddp_bucket_mb": 50})");
  TrainConfig c;
  const absl::Status st = from_json(flat, c, "train");
  ASSERT_FALSE(st.ok());
  for (const char* want : {"a flat training config", "lr -> train.optimizer.lr", "micro_batch -> train.batch.micro_batch",
                           "schedule -> train.schedule.kind", "log_interval -> train.logging.interval",
                           "ddp_bucket_mb -> train.distributed.bucket_mb"})
    EXPECT_TRUE(has(st, want)) << want << " in: " << st;
  EXPECT_FALSE(has(st, "steps ->")) << "top-level keys did not move: " << st;
  // The message ends with the rewritten object: pasted into config.json it reads back.
  const std::string msg(st.message());
  auto rewritten = parse_json(msg.substr(msg.rfind(": {") + 2), "message");
  ASSERT_TRUE(rewritten.ok()) << msg;
  ASSERT_TRUE(from_json(*rewritten, c, "train").ok()) << rewritten->dump();
  EXPECT_EQ(c.steps, 12);
  EXPECT_EQ(c.optimizer.lr, 0.001);
  EXPECT_EQ(c.batch.micro_batch, 4);
  EXPECT_EQ(c.schedule.kind, "wsd");
  EXPECT_EQ(c.logging.interval, 1);
  EXPECT_EQ(c.distributed.bucket_mb, 50);
}

TEST(TrainOverridesTest, SetIsTypeChecked) {
  TrainConfig base;
  auto r = with_flags({"--set", "optimizer.lr=fast"}, base);
  EXPECT_TRUE(has(r.status(), "--set optimizer.lr: train.optimizer.lr: expected a number, got 'fast'")) << r.status();
  r = with_flags({"--set", "batch.micro_batch=2.5"}, base);
  EXPECT_TRUE(has(r.status(), "train.batch.micro_batch: expected an integer")) << r.status();
  r = with_flags({"--set", "hardware.tf32=maybe"}, base);
  EXPECT_TRUE(has(r.status(), "train.hardware.tf32: expected true or false")) << r.status();
  r = with_flags({"--micro-batch", "many"}, base);
  EXPECT_TRUE(has(r.status(), "--micro-batch: train.batch.micro_batch: expected a number, got 'many'")) << r.status();
  r = with_flags({"--set", "optimizer.lr"}, base);
  EXPECT_TRUE(has(r.status(), "expected KEY=VALUE")) << r.status();
  r = with_flags({"--lr", "1e-3", "--set", "optimizer.lr=2e-3"}, base);
  EXPECT_TRUE(has(r.status(), "train.optimizer.lr is already set by --lr")) << r.status();
  r = with_flags({"--set", "schedule.kind=wsd", "--set", "optimizer.beta2=0.99", "--set", "tokens=2e6"}, base);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->schedule.kind, "wsd");
  EXPECT_EQ(r->optimizer.beta2, 0.99);
  EXPECT_EQ(r->tokens, 2000000);
}

// Each short flag is its dotted key: the same config either way, special rules included.
TEST(TrainOverridesTest, AliasesEqualSet) {
  const TrainConfig base = preset_train_config("400m");  // a token budget and batch_tokens to clear
  auto short_flags = with_flags({"--lr", "1e-3", "--steps", "50", "--grad-accum", "3", "--tf32", "off", "--device",
                                 "cpu", "--checkpoint-minutes", "5", "--ddp-bucket-mb", "10"},
                                base);
  auto by_set = with_flags({"--set", "optimizer.lr=1e-3", "--set", "steps=50", "--set", "batch.grad_accum=3", "--set",
                            "hardware.tf32=off", "--set", "hardware.device=cpu", "--set", "checkpoint.minutes=5",
                            "--set", "distributed.bucket_mb=10"},
                           base);
  ASSERT_TRUE(short_flags.ok()) << short_flags.status();
  ASSERT_TRUE(by_set.ok()) << by_set.status();
  EXPECT_EQ(to_json(*short_flags), to_json(*by_set));
  EXPECT_EQ(short_flags->tokens, 0) << "--steps clears the preset's token budget";
  EXPECT_EQ(short_flags->batch.batch_tokens, 0) << "--grad-accum clears batch_tokens";
  EXPECT_EQ(short_flags->optimizer.lr, 1e-3);
  EXPECT_FALSE(short_flags->hardware.tf32);
  // --tokens and --steps on one line: tokens wins (steps does not clear it).
  auto both = with_flags({"--tokens", "2e6", "--steps", "50"}, base);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->tokens, 2000000);
  // Every alias names a field: an alias table typo would fail here, not at a user's prompt.
  for (const FlagAlias& a : flag_aliases()) {
    TrainConfig c = base;
    const std::string value = std::string(a.key).find("device") != std::string::npos ? "cpu"
                              : std::string(a.key).find("dtype") != std::string::npos ? "fp32"
                              : std::string(a.key).find("tf32") != std::string::npos ||
                                        std::string(a.key).find("recompute") != std::string::npos
                                  ? "on"
                                  : "2";
    EXPECT_TRUE(with_flags({a.flag, value}, c).ok()) << a.flag << " -> " << a.key;
  }
}

// A resume refuses a run-defining change made with --set, and names it, as it does for --lr.
TEST(TrainOverridesTest, ResumeRefusesAChangedSet) {
  const model::ModelConfig m = *model::preset("tiny");
  TrainConfig run;
  run.steps = 40;
  ASSERT_TRUE(resolve(run, m).ok());
  TrainOverrides flags;
  auto now = with_flags({"--set", "optimizer.beta2=0.99", "--micro-batch", "4", "--set", "logging.interval=1"}, run,
                        &flags);
  ASSERT_TRUE(now.ok()) << now.status();
  const SourceOf source = [&flags](const std::string& f) { return flags.source_of(f); };
  auto plan = plan_resume(m, run, m, *now, 10, 1, source);
  ASSERT_FALSE(plan.ok());
  const std::string msg(plan.status().message());
  EXPECT_NE(msg.find("train.optimizer.beta2 (--set optimizer.beta2): the run has 0.95, now 0.99"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("train.batch.micro_batch (--micro-batch): the run has 8, now 4"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("logging.interval"), std::string::npos) << "logging is this invocation's: " << msg;
  // An extended budget and per-invocation sections pass, by --set as by --steps.
  auto extended = with_flags({"--set", "steps=80", "--set", "logging.interval=1", "--set", "debug.verify_at_start=0"},
                             run, &flags);
  ASSERT_TRUE(extended.ok()) << extended.status();
  auto ok = plan_resume(m, run, m, *extended, 10, 1, source);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->train.steps, 80);
}

}  // namespace
}  // namespace lm::train

namespace lm::train {
namespace {

// --zero takes 0 or 1; ZeRO-1 needs the overlapped buckets it reduce-scatters, and refuses a
// gradient fault that would poison the local, unreduced gradient. Each error names the field.
TEST(TrainOverridesTest, ZeroIsZeroOrOneAndNeedsTheOverlappedBuckets) {
  const model::ModelConfig m = *model::preset("tiny");
  auto one = with_flags({"--zero", "1"}, TrainConfig{});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->distributed.zero, 1);
  TrainConfig c = *one;
  EXPECT_TRUE(resolve(c, m, 2).ok());
  auto two = with_flags({"--zero", "2"}, TrainConfig{});
  ASSERT_TRUE(two.ok()) << two.status();
  c = *two;
  absl::Status st = resolve(c, m, 2);
  EXPECT_TRUE(has(st, "distributed.zero") && has(st, "got 2")) << st;
  c = *one;
  c.distributed.overlap = false;
  st = resolve(c, m, 2);
  EXPECT_TRUE(has(st, "distributed.zero") && has(st, "distributed.overlap")) << st;
  c = *one;
  c.debug.inject_nan_step = 3;
  st = resolve(c, m, 2);
  EXPECT_TRUE(has(st, "inject_nan_in grad")) << st;
}

}  // namespace
}  // namespace lm::train
