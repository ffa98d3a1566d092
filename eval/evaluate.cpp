#include "eval/evaluate.h"
#include "eval/eval_common.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "corpus/corpus.h"
#include "corpus/text_file.h"
#include "data/shard_set.h"
#include "eval/model_scorer.h"
#include "eval/nll.h"
#include "eval/run.h"
#include "eval/score.h"
#include "eval/tasks.h"

namespace lm::eval {
namespace fs = std::filesystem;

namespace internal {

absl::StatusOr<Models> load_models(const RunOptions& o, const std::string& folder) {
  Models m;
  LM_ASSIGN_OR_RETURN(m.device, resolve_device(o.device, torch::cuda::is_available(), &m.device_why));
  if (m.device == "cuda") m.scorer.device = torch::Device(torch::kCUDA);
  if (o.dtype != "auto" && o.dtype != "fp32" && o.dtype != "bf16")
    return absl::InvalidArgumentError("--dtype: expected auto, fp32 or bf16, got '" + o.dtype + "'");
  if (o.batch_size < 1) return absl::InvalidArgumentError("--batch-size must be >= 1");
  m.scorer.bf16 = o.dtype == "bf16";
  m.dtype = m.scorer.bf16 ? "bf16" : "fp32";
  m.dtype_why = o.dtype != "auto" ? "asked"
                : m.device == "cuda"
                    ? "auto: fp32 on cuda (bf16 not measured on a GPU yet; --dtype bf16 to change)"
                    : "auto: fp32 (mc: bf16 moved 1 of 1,200 predictions of the demo model, docs/eval.md; nll checks "
                      "bf16 on its first windows)";
  m.scorer.batch_size = o.batch_size;
  const bool primary = folder.empty();
  LM_ASSIGN_OR_RETURN(m.run, primary ? load_model_folder(o.run, o.step, o.seed) : load_model_folder(folder, -1, o.seed));
  if (o.twin && primary) m.twin = make_twin(m.run.config, m.run.seed);
  const auto dt = m.scorer.bf16 && m.device == "cuda" ? torch::kBFloat16 : torch::kFloat32;
  m.run.model->to(m.scorer.device, dt);
  if (m.twin) m.twin->to(m.scorer.device, dt);
  if (primary) choose_threads(o.threads, m.run.model, 128);
  log_info("%s %s: %s, %s, seed %d%s; device %s (%s), %s", primary ? "model" : "compare", m.run.dir,
           m.run.kind == "hf" ? std::string("HF checkpoint") : absl::StrCat("checkpoint step ", m.run.step),
           m.run.config.preset.empty() ? m.run.config.architecture : m.run.config.preset, m.run.seed,
           o.twin && primary ? ", twin = init_weights(seed)" : "", m.device, m.device_why,
           o.dtype == "auto" ? "dtype auto" : m.dtype);
  return m;
}

Scorer scorer_for(model::Transformer model, ScorerOptions so, const std::string& label) {
  so.progress_label = label;
  return make_model_scorer(model, so);
}

// What an evaluation scored, for choosing among a run's evaluations: tokens (nll) or items (mc).
int64_t scored_of(const Json& j) {
  int64_t n = 0;
  for (const char* section : {"languages", "tasks"}) {
    if (!j.contains(section) || !j[section].is_object()) continue;
    for (const auto& [k, v] : j[section].items()) {
      if (v.contains("model") && v["model"].contains("tokens")) n += v["model"]["tokens"].get<int64_t>();
      else if (v.contains("n") && v["n"].is_number_integer()) n += v["n"].get<int64_t>();
    }
  }
  return n;
}

// Ordering of evaluations for RUN/eval/<job>.json: a later checkpoint, then with the twin, then
// more tokens or items scored. A smaller evaluation never replaces a larger one.
std::tuple<int64_t, bool, int64_t> rank_of(const Json& j) {
  const bool twin = j.value("twin", std::string()).rfind("not scored", 0) != 0;
  return {j.value("step", int64_t{-1}), twin, scored_of(j)};
}

// Without --out: every evaluation is kept in RUN/eval/<job>-step<N>-<size>-<hash of its
// configuration>.json (the same configuration again replaces only itself), and RUN/eval/<job>.json,
// which the report and the model card read, holds the largest (rank_of) with "evaluation" saying
// which file it is.
absl::Status write_result(const RunOptions& o, const std::string& job, Json j, const Json& config,
                          const std::string& size) {
  if (!o.out.empty()) {
    LM_RETURN_IF_ERROR(write_json_file(o.out, j));
    log_info("wrote %s", o.out);
    return absl::OkStatus();
  }
  if (j.value("kind_of_folder", std::string()) == "hf") {
    log_info("%s is an HF checkpoint folder: nothing is written into it (pass --out FILE to keep the JSON)", o.run);
    return absl::OkStatus();
  }
  const RunFolder run(o.run);
  std::error_code ec;
  fs::create_directories(run.eval(), ec);
  if (ec) return absl::InternalError(absl::StrCat(run.eval(), ": cannot create: ", ec.message()));
  const std::string key = config.dump();
  const std::string name = absl::StrCat(job, "-step", j.value("step", int64_t{0}), "-", size, "-",
                                        hex64(fnv1a64(key.data(), key.size())).substr(0, 8), ".json");
  j["evaluation"] = Json{{"file", name}, {"scored", scored_of(j)}, {"unit", job == "nll" ? "tokens" : "items"},
                         {"configuration", config},
                         {"chosen", "the largest evaluation of the latest checkpoint (later step, then with the "
                                    "twin, then more scored): every one is kept as eval/" + job + "-*.json"}};
  LM_RETURN_IF_ERROR(write_json_file((fs::path(run.eval()) / name).string(), j));
  const std::string summary = (fs::path(run.eval()) / (job + ".json")).string();
  if (fs::exists(summary)) {
    auto old = read_json_file(summary);
    if (old.ok() && rank_of(*old) > rank_of(j)) {
      log_info("wrote %s/%s; kept %s (a larger evaluation: %d scored at step %d, this one %d)", run.eval(), name,
               summary, scored_of(*old), old->value("step", int64_t{-1}), scored_of(j));
      return absl::OkStatus();
    }
  }
  LM_RETURN_IF_ERROR(write_json_file(summary, j));
  log_info("wrote %s/%s and %s", run.eval(), name, summary);
  return absl::OkStatus();
}

Json run_header(const Models& m, const RunOptions& o) {
  return Json{{"run", o.run},
              {"kind_of_folder", m.run.kind},
              {"checkpoint", m.run.checkpoint},
              {"step", m.run.step},
              {"seed", m.run.seed},
              {"model", to_json(m.run.config)},
              {"tokenizer_hash", m.run.tokenizer.hash()},
              {"device", m.device},
              {"device_rule", m.device_why},
              {"dtype", m.dtype},
              {"dtype_rule", m.dtype_why},
              {"twin", !o.twin ? "not scored (pass --twin)"
                       : m.run.kind == "hf"
                           ? "Transformer(the checkpoint's config) after init_weights(--seed): a seeded random init"
                           : "Transformer(config) after init_weights(train.seed): the run's own initial weights"}};
}

Json compare_header(const Models& c) {
  return Json{{"folder", c.run.dir},
              {"kind_of_folder", c.run.kind},
              {"checkpoint", c.run.checkpoint},
              {"step", c.run.step},
              {"model", to_json(c.run.config)},
              {"tokenizer_hash", c.run.tokenizer.hash()},
              {"framing", c.run.tokenizer.framing().describe()}};
}

// Documents of a text file: one per non-empty line, each framed as prepare frames a document.
// `bytes` / `chars` (optional) receive the UTF-8 bytes and code points of those lines (the raw
// text every tokenizer scores, CR and LF excluded).
TokenIds text_stream(const tokenizer::Tokenizer& tok, const std::string& text, int64_t* bytes = nullptr,
                     int64_t* chars = nullptr) {
  TokenIds stream;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) {
      const TokenIds ids = tok.frame(tok.encode(line));
      stream.insert(stream.end(), ids.begin(), ids.end());
      if (bytes) *bytes += static_cast<int64_t>(line.size());
      if (chars) *chars += data::count_code_points(line);
    }
    pos = end + 1;
  }
  return stream;
}

}  // namespace internal

using namespace internal;

absl::StatusOr<std::string> resolve_device(const std::string& asked, bool cuda_available, std::string* why) {
  if (asked == "auto") {
    *why = cuda_available ? "auto: a CUDA device is visible" : "auto: no CUDA device visible";
    return std::string(cuda_available ? "cuda" : "cpu");
  }
  if (asked != "cpu" && asked != "cuda")
    return absl::InvalidArgumentError("--device: expected auto, cpu or cuda, got '" + asked + "'");
  if (asked == "cuda" && !cuda_available)
    return absl::FailedPreconditionError("--device cuda: no CUDA device visible (this build or machine has none)");
  *why = "asked";
  return asked;
}

std::string prefix_rule(const std::string& prefix) {
  if (prefix == "bos")
    return "BOS before every context: where a document starts in training with the framing bos + text + eos "
           "(the default then), and what lm-evaluation-harness >= 0.4.10 (hf model) does with this export's "
           "tokenizer (add_bos_token true)";
  if (prefix == "eos")
    return "EOS before every context: where a document starts in training with the framing text + eos (after "
           "the previous document's EOS; the default then)";
  return "nothing before the context: lm-evaluation-harness <= 0.4.9.1";
}

std::string default_prefix(const tokenizer::Framing& framing) { return framing.bos ? "bos" : "eos"; }

absl::StatusOr<ContextPrefix> context_prefix(const tokenizer::Tokenizer& tok, const std::string& prefix) {
  ContextPrefix p;
  p.from_framing = prefix.empty();
  p.mode = p.from_framing ? default_prefix(tok.framing()) : prefix;
  if (p.mode == "bos") p.ids = {tok.bos_id()};
  else if (p.mode == "eos") p.ids = {tok.eos_id()};
  else if (p.mode != "none")
    return absl::InvalidArgumentError("--prefix: expected bos, eos or none, got '" + prefix + "'");
  return p;
}

namespace {

// --seq-len (0: the model's), --stride and --docs checked against the model.
absl::StatusOr<int64_t> nll_seq_len(const NllOptions& o, const model::ModelConfig& c) {
  const int64_t seq_len = o.seq_len > 0 ? o.seq_len : c.max_seq_len;
  if (seq_len > c.max_seq_len)
    return absl::InvalidArgumentError(absl::StrCat("--seq-len ", seq_len, " exceeds the model's max_seq_len ",
                                                   c.max_seq_len));
  if (o.stride < 0 || o.stride > seq_len)
    return absl::InvalidArgumentError(absl::StrCat("--stride must lie in [0, seq_len=", seq_len, "]"));
  if (o.docs != "stream" && o.docs != "harness")
    return absl::InvalidArgumentError("--docs: expected stream or harness, got '" + o.docs + "'");
  if (o.docs == "harness" && o.stride != 0)
    return absl::InvalidArgumentError("--docs harness uses the harness's rolling windows; drop --stride");
  return seq_len;
}

// The windows of one language; with --docs harness also the bytes and code points of its
// documents, each decoded on its own (the harness's definition).
struct LangWindows {
  std::string lang;
  std::vector<Window> windows;
  int64_t doc_bytes = 0, doc_chars = 0;
  int64_t text_bytes = 0, text_chars = 0;  // --text scored whole: the raw text's UTF-8 bytes / code points
};

// Appends the windows of `stream` (at most `budget` scored tokens when > 0) and returns how many
// were added.
size_t add_windows(const NllOptions& o, const tokenizer::Tokenizer& tok, int64_t seq_len, const TokenIds& stream,
                   int64_t budget, LangWindows& lw) {
  const size_t before = lw.windows.size();
  if (o.docs != "harness") {
    for (auto& w : make_windows(stream, seq_len, o.stride, budget)) lw.windows.push_back(std::move(w));
    return lw.windows.size() - before;
  }
  int64_t scored = 0;
  // Each document without its framing, after the token that starts a document in training.
  for (const auto& doc : split_documents(stream, tok.eos_id(), tok.framing().bos ? tok.bos_id() : -1)) {
    if (budget > 0 && scored >= budget) break;
    for (auto& w : harness_rolling_windows(doc, tok.start_id(), seq_len)) lw.windows.push_back(std::move(w));
    scored += static_cast<int64_t>(doc.size());
    const std::string text = tok.decode(doc);
    lw.doc_bytes += static_cast<int64_t>(text.size());
    lw.doc_chars += data::count_code_points(text);
  }
  return lw.windows.size() - before;
}

// Windows per language: within each validation shard (as the trainer's val loss), or the text.
absl::StatusOr<std::vector<LangWindows>> nll_windows(const NllOptions& o, const tokenizer::Tokenizer& tok,
                                                     int64_t seq_len) {
  std::vector<LangWindows> langs;
  if (!o.text.empty()) {
    LM_ASSIGN_OR_RETURN(std::string text, data::read_text_file(o.text));
    langs.push_back({o.langs.empty() ? "text" : o.langs[0], {}, 0, 0, 0, 0});
    LangWindows& lw = langs.back();
    const TokenIds stream = text_stream(tok, text, &lw.text_bytes, &lw.text_chars);
    add_windows(o, tok, seq_len, stream, o.max_tokens, lw);
    if (o.max_tokens > 0) lw.text_bytes = lw.text_chars = 0;  // only part of the text is scored
    return langs;
  }
  LM_ASSIGN_OR_RETURN(auto set, data::ShardSet::open(o.data));
  LM_RETURN_IF_ERROR(set.check_tokenizer(tok));
  for (const auto& lang : o.langs.empty() ? set.languages("val") : o.langs) {
    auto readers = set.readers(lang, "val");
    if (readers.empty())
      return absl::NotFoundError(absl::StrCat(o.data, ": no validation shard for language '", lang, "' (has: ",
                                              absl::StrJoin(set.languages("val"), ","), ")"));
    LangWindows lw{lang, {}, 0, 0, 0, 0};
    int64_t budget = o.max_tokens;
    for (const auto& r : readers) {
      if (o.max_tokens > 0 && budget <= 0) break;
      TokenIds stream(r.size());
      r.copy(0, r.size(), stream.data());
      const size_t added = add_windows(o, tok, seq_len, stream, o.max_tokens > 0 ? budget : 0, lw);
      for (size_t i = lw.windows.size() - added; i < lw.windows.size(); ++i)
        budget -= static_cast<int64_t>(lw.windows[i].tokens.size()) - lw.windows[i].first_target;
    }
    langs.push_back(std::move(lw));
  }
  return langs;
}

Json nll_result_header(const Models& m, const NllOptions& o, int64_t seq_len) {
  const bool harness = o.docs == "harness";
  const tokenizer::Framing& framing = m.run.tokenizer.framing();
  Json result = run_header(m, o.run);
  result["kind"] = "nll";
  result["framing"] = framing.describe();
  if (harness) result["prefix"] = default_prefix(framing);
  result["source"] = o.text.empty() ? o.data : o.text;
  result["seq_len"] = seq_len;
  result["stride"] = o.stride;
  result["docs"] = o.docs;
  result["definition"] =
      harness ? "lm-evaluation-harness loglikelihood_rolling: each document (a line of --text, or the text "
                "tokens between EOS in a shard) on its own after the framing's start token (prefix: BOS with "
                "bos + text + eos, else EOS), rolling windows of seq_len, BOS and EOS never scored"
              : "token stream as in training: documents framed as " + framing.describe() +
                    " (a --text line too), every BOS and EOS prediction scored, windows run across documents";
  result["windows"] = harness ? "harness rolling: the first window after the prefix, later ones with seq_len tokens of context"
                      : o.stride == 0 || o.stride == seq_len
                          ? "non-overlapping: every token after the first of each shard scored once"
                          : "sliding: each token scored once with >= seq_len - stride tokens of context";
  result["bytes_rule"] =
      harness ? "bytes/chars = sum over documents of the UTF-8 bytes / code points of tokenizer.decode(document); "
                "bits = nats / ln 2"
              : "bytes/chars = UTF-8 bytes / code points of tokenizer.decode(all scored tokens); bits = nats / ln 2";
  result["languages"] = Json::object();
  return result;
}

// --dtype auto for nll (issue 41): on the CPU, bf16 autocast (training's fused paths) where the
// first windows' NLL (up to ~4k scored tokens, from each language in turn) moves by at most 0.1%
// against fp32, else fp32; the check's figures in m.dtype_why. The --compare model, when given,
// follows the same choice.
absl::Status choose_nll_dtype(Models& m, const std::vector<LangWindows>& langs, Models* compare) {
  if (m.device != "cpu") return absl::OkStatus();
  constexpr int64_t kCheckTokens = 4096;  // scored tokens of the check, taken from each language in turn
  std::vector<Window> check;
  int64_t tokens = 0;
  for (size_t i = 0; tokens < kCheckTokens; ++i) {
    bool any = false;
    for (const auto& lw : langs) {
      if (i >= lw.windows.size() || tokens >= kCheckTokens) continue;
      const Window& w = lw.windows[i];
      check.push_back(w);
      tokens += static_cast<int64_t>(w.tokens.size()) - w.first_target;
      any = true;
    }
    if (!any) break;
  }
  ScorerOptions so = m.scorer;
  so.progress_label.clear();
  so.bf16 = false;
  LM_ASSIGN_OR_RETURN(NllStats fp32, score_windows(check, make_model_scorer(m.run.model, so)));
  so.bf16 = true;
  LM_ASSIGN_OR_RETURN(NllStats bf16, score_windows(check, make_model_scorer(m.run.model, so)));
  const double moved = std::abs(bf16.sum_nats - fp32.sum_nats) / std::max(std::abs(fp32.sum_nats), 1e-12);
  const bool take = moved <= 1e-3;
  m.scorer.bf16 = take;
  m.dtype = take ? "bf16" : "fp32";
  m.dtype_why = absl::StrFormat(
      "auto: the first %d windows (%d scored tokens) move by %.5f%% in bf16 against fp32 (limit 0.1%%): %s",
      check.size(), tokens, 100 * moved,
      take ? "bf16 autocast, as fit --dtype bf16 trains" : "fp32 (--dtype bf16 forces bf16)");
  if (compare != nullptr) {
    compare->scorer.bf16 = take;
    compare->dtype = m.dtype;
    compare->dtype_why = "the model's choice: " + m.dtype_why;
  }
  if (take) log_info("dtype %s", m.dtype_why);
  else log_warn("dtype %s", m.dtype_why);
  return absl::OkStatus();
}

// Scores one language with the model (and the twin): its entry of result["languages"] and, with
// --dump-tokens, of dump["languages"].
absl::Status score_language(const Models& m, const NllOptions& o, const LangWindows& lw, Json& result, Json& dump) {
  const auto& windows = lw.windows;
  if (windows.empty()) return absl::InvalidArgumentError(absl::StrCat(lw.lang, ": fewer than 2 tokens to score"));
  std::vector<std::vector<double>> per_model, per_twin;
  LM_ASSIGN_OR_RETURN(NllStats model, score_windows(windows, scorer_for(m.run.model, m.scorer, "nll " + lw.lang + " model"),
                                                    &per_model));
  count_text(model, windows, [&](const TokenIds& ids) { return m.run.tokenizer.decode(ids); });
  if (o.docs == "harness") model.bytes = lw.doc_bytes, model.chars = lw.doc_chars;
  Json lj = Json{{"model", nll_to_json(model)}};
  if (lw.text_bytes > 0) {
    lj["text_bytes"] = lw.text_bytes, lj["text_chars"] = lw.text_chars;
    lj["model"]["bits_per_text_byte"] = model.sum_nats / std::log(2.0) / static_cast<double>(lw.text_bytes);
  }
  if (o.run.twin) {
    LM_ASSIGN_OR_RETURN(NllStats twin, score_windows(windows, scorer_for(m.twin, m.scorer, "nll " + lw.lang + " twin"),
                                                     &per_twin));
    twin.bytes = model.bytes;
    twin.chars = model.chars;
    lj["twin"] = nll_to_json(twin);
    lj["twin_minus_model"] = Json{{"nats_per_token", twin.nats_per_token() - model.nats_per_token()},
                                  {"bits_per_byte", twin.bits_per_byte() - model.bits_per_byte()},
                                  {"bits_per_char", twin.bits_per_char() - model.bits_per_char()}};
  }
  lj["windows"] = static_cast<int64_t>(windows.size());
  result["languages"][lw.lang] = lj;
  if (o.dump_tokens.empty()) return absl::OkStatus();
  Json wl = Json::array();
  for (size_t i = 0; i < windows.size(); ++i) {
    Json w = Json{{"tokens", windows[i].tokens}, {"first_target", windows[i].first_target}, {"nll", per_model[i]}};
    if (o.run.twin) w["twin_nll"] = per_twin[i];
    wl.push_back(std::move(w));
  }
  dump["languages"][lw.lang] = std::move(wl);
  return absl::OkStatus();
}

// --compare: the second model's windows over the same text (or shards of its tokenizer), from its
// own tokenizer; per language its figures beside the model's and compare - model. Over a --text
// scored whole, bits_per_text_byte divides both by the same raw bytes: the comparison that holds
// across tokenizers.
absl::Status score_compare(const Models& c, const NllOptions& o, Json& result) {
  LM_ASSIGN_OR_RETURN(const int64_t seq_len, nll_seq_len(o, c.run.config));
  auto windows = nll_windows(o, c.run.tokenizer, seq_len);
  if (!windows.ok())
    return annotate(windows.status(), "--compare " + c.run.dir + " (two tokenizers: score raw text with --text)");
  result["compare"] = compare_header(c);
  result["compare"]["seq_len"] = seq_len;
  for (const LangWindows& lw : *windows) {
    if (lw.windows.empty()) return absl::InvalidArgumentError(absl::StrCat(lw.lang, ": fewer than 2 tokens to score"));
    LM_ASSIGN_OR_RETURN(NllStats s, score_windows(lw.windows, scorer_for(c.run.model, c.scorer,
                                                                         "nll " + lw.lang + " compare")));
    count_text(s, lw.windows, [&](const TokenIds& ids) { return c.run.tokenizer.decode(ids); });
    if (o.docs == "harness") s.bytes = lw.doc_bytes, s.chars = lw.doc_chars;
    Json& lj = result["languages"][lw.lang];
    Json cj = nll_to_json(s);
    const Json& mj = lj["model"];
    Json diff = {{"nats_per_token", s.nats_per_token() - mj.value("nats_per_token", 0.0)},
                 {"bits_per_byte", s.bits_per_byte() - mj.value("bits_per_byte", 0.0)},
                 {"bits_per_char", s.bits_per_char() - mj.value("bits_per_char", 0.0)}};
    if (lw.text_bytes > 0) {
      cj["bits_per_text_byte"] = s.sum_nats / std::log(2.0) / static_cast<double>(lw.text_bytes);
      diff["bits_per_text_byte"] = cj["bits_per_text_byte"].get<double>() - mj.value("bits_per_text_byte", 0.0);
    }
    if (s.bytes != mj.value("bytes", int64_t{0}))
      log_warn("%s: the two tokenizers decode the scored text to %d and %d bytes; compare bits_per_text_byte", lw.lang,
               mj.value("bytes", int64_t{0}), s.bytes);
    lj["compare"] = std::move(cj);
    lj["compare_minus_model"] = std::move(diff);
  }
  return absl::OkStatus();
}

// The --compare model, refused before any scoring where it cannot score the same text.
absl::StatusOr<Models> load_compare(const NllOptions& o, const Models& m) {
  LM_ASSIGN_OR_RETURN(Models c, load_models(o.run, o.run.compare));
  if (o.max_tokens > 0 && c.run.tokenizer.hash() != m.run.tokenizer.hash())
    return absl::InvalidArgumentError(
        "--max-tokens with --compare and two tokenizers: each would stop at a different point of the text; "
        "drop --max-tokens (score a shorter --text file instead)");
  return c;
}

}  // namespace

absl::StatusOr<Json> run_nll(const NllOptions& o) {
  if (o.data.empty() == o.text.empty()) return absl::InvalidArgumentError("give exactly one of --data or --text");
  LM_ASSIGN_OR_RETURN(Models m, load_models(o.run));
  LM_ASSIGN_OR_RETURN(const int64_t seq_len, nll_seq_len(o, m.run.config));
  LM_ASSIGN_OR_RETURN(std::vector<LangWindows> langs, nll_windows(o, m.run.tokenizer, seq_len));
  Json result = nll_result_header(m, o, seq_len);
  Json dump = Json{{"run", o.run.run}, {"checkpoint", m.run.checkpoint}, {"seq_len", seq_len},
                   {"languages", Json::object()}};
  std::optional<Models> compare;
  if (!o.run.compare.empty()) {
    LM_ASSIGN_OR_RETURN(compare, load_compare(o, m));
  }
  if (o.run.dtype == "auto") LM_RETURN_IF_ERROR(choose_nll_dtype(m, langs, compare ? &*compare : nullptr));
  result["dtype"] = m.dtype, result["dtype_rule"] = m.dtype_why;
  for (const auto& lw : langs) LM_RETURN_IF_ERROR(score_language(m, o, lw, result, dump));
  if (compare) LM_RETURN_IF_ERROR(score_compare(*compare, o, result));
  if (!o.dump_tokens.empty()) {
    LM_RETURN_IF_ERROR(write_file_atomic(o.dump_tokens, dump.dump()));
    log_info("wrote per-token NLL of %d languages to %s", langs.size(), o.dump_tokens);
  }
  Json config = {{"source", result["source"]}, {"langs", o.langs}, {"seq_len", seq_len}, {"stride", o.stride},
                       {"max_tokens", o.max_tokens}, {"docs", o.docs}, {"twin", o.run.twin}};
  if (!o.run.compare.empty()) config["compare"] = o.run.compare;
  result["max_tokens"] = o.max_tokens;
  LM_RETURN_IF_ERROR(write_result(o.run, "nll", result, config,
                                  o.max_tokens > 0 ? absl::StrCat(o.max_tokens, "tok-", o.docs) : "all-" + o.docs));
  return result;
}

}  // namespace lm::eval
