// lmtrain demo: the whole chain on the sample corpus bundled in the repository. Each stage runs
// as the same subcommand a user would type (so the demo exercises the real command lines), and
// the summary is read back from the artefacts they wrote.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "app/commands.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/run_folder.h"
#include "model/hf_export.h"

extern char** environ;

namespace lm::app {
namespace fs = std::filesystem;
namespace {

struct DemoOptions {
  std::string out = "demo-out";
  std::string corpus;  // default: the bundled data/sample/corpus.json
  std::string preset = "small";
  int64_t vocab = 8000;
  int64_t steps = 240;
  int64_t micro_batch = 16;
  int64_t seq_len = 256;
  double lr = 2e-3;
  std::string dtype = "bf16";
};

std::string self_exe() { return fs::read_symlink("/proc/self/exe").string(); }

// Where the bundled sample corpus is looked for, in order: $LM_SAMPLE_DIR; beside an installed
// binary, <prefix>/share/lmforge/sample (cmake --install, the Docker images); the source tree's
// data/sample, recorded when the build was configured (any build folder, in the tree or not).
// Neither the working directory nor the build folder's place matters.
std::vector<fs::path> sample_candidates() {
  std::vector<fs::path> c;
  if (const char* env = std::getenv("LM_SAMPLE_DIR")) c.emplace_back(fs::path(env) / "corpus.json");
  c.push_back(fs::path(self_exe()).parent_path() / "../share/lmforge/sample/corpus.json");
#ifdef LM_SAMPLE_SOURCE_DIR
  c.push_back(fs::path(LM_SAMPLE_SOURCE_DIR) / "corpus.json");
#endif
  return c;
}

absl::StatusOr<std::string> find_corpus() {
  const std::vector<fs::path> candidates = sample_candidates();
  if (std::getenv("LM_SAMPLE_DIR") != nullptr && !fs::exists(candidates.front()))
    return absl::NotFoundError(candidates.front().string() + ": not found (LM_SAMPLE_DIR names the folder holding "
                               "the sample's corpus.json; unset it to use the bundled one)");
  std::vector<std::string> tried;
  for (const auto& c : candidates) {
    if (fs::exists(c)) return fs::weakly_canonical(c).string();
    tried.push_back(c.lexically_normal().string());
  }
  return absl::NotFoundError("the bundled sample corpus was not found (looked at " + absl::StrJoin(tried, ", ") +
                             "); pass --corpus PATH, set LM_SAMPLE_DIR, or install with cmake --install");
}

// SIGINT/SIGTERM sent to the demo go to the stage running (a `kill` of the demo must not leave
// its fit training alone, with nobody waiting); the demo then exits 128+signal once the stage has
// (fit checkpoints first). A terminal's Ctrl-C reaches both anyway; fit takes a repeat calmly.
volatile sig_atomic_t g_stage_pid = 0;
volatile sig_atomic_t g_stop_signal = 0;

void forward_stop(int sig) {
  g_stop_signal = sig;
  if (g_stage_pid > 0) kill(g_stage_pid, sig);
}

absl::Status stopped_by_signal(const std::string& stage) {
  global_options().exit_code = 128 + g_stop_signal;
  return absl::CancelledError(absl::StrFormat("demo stopped by signal %d during stage '%s'", g_stop_signal, stage));
}

// Runs a program to completion with the same stdout/stderr; returns its exit code.
// Each stage runs at the demo's own verbosity (-v, -q).
absl::Status run_stage(const std::string& name, std::vector<std::string> argv) {
  if (g_stop_signal != 0) return stopped_by_signal(name);
  if (global_options().quiet) argv.push_back("-q");
  else if (global_options().verbose) argv.push_back("-v");
  std::printf("\n== %s: %s\n", name.c_str(), absl::StrJoin(argv, " ").c_str());
  std::fflush(stdout);
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, cargs[0], nullptr, nullptr, cargs.data(), environ) != 0)
    return absl::InternalError("cannot start " + argv[0]);
  g_stage_pid = pid;
  if (g_stop_signal != 0) kill(pid, g_stop_signal);  // a signal between the spawn and the line above
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError("waitpid failed");
  }
  g_stage_pid = 0;
  if (g_stop_signal != 0) return stopped_by_signal(name);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0) {
    return absl::Status(code == 2 ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kInternal,
                        absl::StrFormat("demo stage '%s' failed with exit code %d (see its output above)", name, code));
  }
  return absl::OkStatus();
}

Json read_or_empty(const fs::path& p) {
  auto j = read_json_file(p.string());
  return j.ok() ? *j : Json::object();
}

// ---- summary.md: readable tables of what each stage wrote (issue 30 item 16), paths relative to
// the demo folder. Every number is copied from the stage's own file.

std::string tokenizer_section(const fs::path& out) {
  const Json f = read_or_empty(out / "tok" / "fertility.json");
  if (!f.is_object() || !f.contains("rows")) return "";
  std::string s = absl::StrFormat("## Tokenizer (`tok/`, vocabulary %s)\n\nOn held-out documents (`tok/fertility.json`):\n\n",
                                  f.value("vocab_size", Json()).dump());
  s += "| language | texts | code points / token | bytes / token | tokens / word | byte fallback | exact round trip |\n"
       "|---|---|---|---|---|---|---|\n";
  for (const Json& r : f["rows"]) {
    if (r.value("set", "") != "heldout") continue;
    s += absl::StrFormat("| %s | %d | %.2f | %.2f | %.2f | %.2f%% | %.0f%% |\n", r.value("lang", "?"),
                         r.value("texts", 0), r.value("cp_per_token", 0.0), r.value("bytes_per_token", 0.0),
                         r.value("tokens_per_word", 0.0), 100 * r.value("byte_fallback_rate", 0.0),
                         100 * r.value("roundtrip_rate", 0.0));
  }
  return s + "\n";
}

std::string shards_section(const fs::path& out) {
  const Json m = read_or_empty(out / "shards" / "manifest.json");
  if (!m.is_object() || !m.contains("languages")) return "";
  std::string s = "## Shards (`shards/`)\n\n| language | documents | training tokens | validation tokens | "
                  "share of each batch |\n|---|---|---|---|---|\n";
  int64_t total = 0;
  for (const auto& [lang, v] : m["languages"].items()) {
    total += v.value("train_tokens", int64_t{0});
    s += absl::StrFormat("| %s | %d | %d | %d | %.0f%% |\n", lang, v.value("docs", 0), v.value("train_tokens", int64_t{0}),
                         v.value("val_tokens", int64_t{0}), 100 * v.value("token_share", 0.0));
  }
  return s + absl::StrFormat("\n%s training tokens in all.\n\n", format_count(static_cast<double>(total)));
}

std::string training_section(const fs::path& out, const std::string& preset) {
  auto m = read_metrics(RunFolder((out / "runs" / preset).string()).metrics());
  if (!m.ok() || m->empty()) return "";
  const Json& last = m->back();
  std::string s = absl::StrFormat("## Training (`runs/%s/`)\n\n| steps | tokens | final train loss (nats/token) | "
                                  "tok/s | MFU |\n|---|---|---|---|---|\n| %d | %s | %.4f | %.0f | %.1f%% |\n",
                                  preset, last.value("step", 0), format_count(last.value("tokens", 0.0)),
                                  last.value("loss", 0.0), last.value("tokens_per_s", 0.0), 100 * last.value("mfu", 0.0));
  for (auto it = m->rbegin(); it != m->rend(); ++it) {
    if (!it->contains("val_loss") || !(*it)["val_loss"].is_object()) continue;
    s += absl::StrFormat("\nValidation loss at step %s (the trainer's windows; `lmeval nll` below scores every "
                         "validation token):\n\n| language | nats/token |\n|---|---|\n", (*it)["step"].dump());
    for (const auto& [lang, v] : (*it)["val_loss"].items())
      if (v.is_number()) s += absl::StrFormat("| %s | %.4f |\n", lang, v.get<double>());
    break;
  }
  return s;
}

std::string demo_summary(const fs::path& out, const std::string& preset, const std::string& corpus, double minutes,
                         const std::string& threads) {
  std::string s = absl::StrFormat("# lmforge demo summary\n\nThe whole chain on %s in %.1f minutes (%s), "
                                  "written by `lmtrain demo` from the files each stage wrote (paths relative to "
                                  "this folder).\n\n",
                                  corpus, minutes,
                                  threads == "0" ? "thread count chosen by each stage" : "--threads " + threads);
  s += tokenizer_section(out) + shards_section(out) + training_section(out, preset);
  const std::string ev = model::eval_tables((out / "runs" / preset).string());
  if (!ev.empty()) s += "\n## Evaluation (`runs/" + preset + "/eval/`)\n" + ev;
  return s;
}

}  // namespace

absl::Status run_demo(const DemoOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string corpus = o.corpus;
  if (corpus.empty()) {
    LM_ASSIGN_OR_RETURN(corpus, find_corpus());
  } else if (!fs::exists(corpus)) {
    return absl::NotFoundError(corpus + ": not found (--corpus)");
  }
  const fs::path out(o.out);
  const fs::path marker = out / ".lmforge-demo";
  if (fs::exists(out) && !fs::is_empty(out) && !fs::exists(marker)) {
    return absl::AlreadyExistsError(o.out + ": exists and was not made by 'lmtrain demo'; pick another --out");
  }
  std::error_code ec;
  for (const char* sub : {"tok", "shards", "runs"}) {  // a fresh demo each time
    LM_RETURN_IF_ERROR(remove_tree((out / sub).string()));
  }
  fs::create_directories(out, ec);
  LM_RETURN_IF_ERROR(write_file_atomic(marker.string(), "made by lmtrain demo\n"));

  on_stop_signals(forward_stop);
  const std::string lmtrain = self_exe();
  const std::string lmeval = (fs::path(lmtrain).parent_path() / "lmeval").string();
  const std::string tok = (out / "tok").string(), shards = (out / "shards").string(),
                    run = (out / "runs" / o.preset).string();
  const std::string threads = std::to_string(global_options().threads);
  std::printf("lmforge demo: corpus %s -> %s\n", corpus.c_str(), o.out.c_str());
  LM_RETURN_IF_ERROR(run_stage("1/4 tokenizer", {lmtrain, "tokenizer", "--corpus", corpus, "--vocab-size",
                                                 std::to_string(o.vocab), "--out", tok, "--threads", threads}));
  LM_RETURN_IF_ERROR(run_stage("2/4 shards", {lmtrain, "prepare", "--corpus", corpus, "--tokenizer", tok, "--out",
                                              shards, "--val-fraction", "0.03", "--threads", threads}));
  LM_RETURN_IF_ERROR(run_stage("3/4 train", {lmtrain, "fit", "--data", shards, "--preset", o.preset, "--out", run,
                                             "--steps", std::to_string(o.steps), "--micro-batch",
                                             std::to_string(o.micro_batch), "--seq-len", std::to_string(o.seq_len),
                                             "--lr", absl::StrFormat("%g", o.lr), "--dtype", o.dtype,
                                             "--threads", threads}));
  const bool have_eval = fs::exists(lmeval);
  if (have_eval) {
    LM_RETURN_IF_ERROR(run_stage("4/4 eval", {lmeval, "nll", "--run", run, "--data", shards, "--twin", "--threads", threads}));
  }
  if (fs::exists(fs::path(lmtrain).parent_path() / "lmtrain")) {
    // The report is best effort: the run is already complete and evaluated.
    (void)run_stage("report", {lmtrain, "report", "--run", run});
  }

  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 60.0;
  const std::string shown = o.corpus.empty() ? "the bundled sample (`data/sample/corpus.json`)" : "`" + o.corpus + "`";
  const std::string s = demo_summary(out, o.preset, shown, minutes, threads);
  LM_RETURN_IF_ERROR(write_file_atomic((out / "summary.md").string(), s));
  std::printf("\n== demo finished in %.1f minutes\n  tokenizer: %s\n  shards:    %s\n  run:       %s\n  summary:   %s\n",
              minutes, tok.c_str(), shards.c_str(), run.c_str(), (out / "summary.md").string().c_str());
  return absl::OkStatus();
}

void add_demo(CLI::App& app, Registry& reg) {
  static DemoOptions o;
  // No duration here: the measured one (time, tok/s, MFU, machine) is README.md's, and the demo
  // prints its own at the end ("demo finished in N minutes").
  auto* sub = app.add_subcommand(
      "demo", "the whole chain on the bundled sample corpus, on the CPU (measured time and throughput: README.md, \"The demo\")");
  sub->add_option("--out", o.out, "output folder (re-created on each run)")->capture_default_str();
  sub->add_option("--corpus", o.corpus, "corpus manifest (default: the bundled sample: $LM_SAMPLE_DIR, else "
                  "<prefix>/share/lmforge/sample of an install, else the source tree's data/sample)");
  sub->add_option("--preset", o.preset, "model preset")->capture_default_str();
  sub->add_option("--vocab-size", o.vocab, "tokenizer vocabulary")->capture_default_str();
  sub->add_option("--steps", o.steps, "training steps")->capture_default_str();
  sub->add_option("--micro-batch", o.micro_batch, "sequences per step")->capture_default_str();
  sub->add_option("--seq-len", o.seq_len, "sequence length")->capture_default_str();
  sub->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  sub->add_option("--dtype", o.dtype, "fp32 or bf16")->capture_default_str();
  sub->footer(
      "Examples:\n"
      "  lmtrain demo\n"
      "  lmtrain demo --out /tmp/demo --steps 60        # a quicker look");
  add_global_flags(sub);
  reg.push_back({sub, [] { return run_demo(o); }});
}

}  // namespace lm::app
