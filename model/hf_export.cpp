#include "model/hf_export.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <tuple>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "model/safetensors.h"
#include "model/checkpoint_reader.h"
#include "model/gguf_bpe.h"
#include "model/hf_tokenizer.h"

namespace lm::model {
namespace fs = std::filesystem;
namespace {

absl::Status write_json(const fs::path& p, const Json& j) {
  return write_file_atomic(p.string(), j.dump(2) + "\n");
}

std::string fmt_num(const Json& j, const char* key, const char* f = "%.4f") {
  if (!j.contains(key) || !j[key].is_number()) return "–";
  return absl::StrFormat(f, j[key].get<double>());
}

const Json* at(const Json& j, std::initializer_list<const char*> path) {
  const Json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return nullptr;
    p = &(*p)[k];
  }
  return p;
}

// A number at `path` as the card prints it ("%.4f"; "–" when absent); tests compare with this.
std::string num_at(const Json& j, std::initializer_list<const char*> path, const char* f = "%.4f") {
  const Json* p = at(j, path);
  if (!p || !p->is_number()) return "–";
  return absl::StrFormat(f, p->get<double>());
}

// One markdown section per result file: `intro` (its "{step}" replaced by the file's step) and
// one row per entry of j[key], made by `row`; nothing when the file or the key is absent.
std::string json_section(const absl::StatusOr<Json>& j, const char* key, const std::string& intro,
                         const std::function<std::string(const std::string&, const Json&)>& row) {
  if (!j.ok() || !at(*j, {key}) || !(*j)[key].is_object()) return "";
  // Which of the run's evaluations eval/<job>.json is (eval's choice: the largest, latest).
  std::string which;
  if (at(*j, {"evaluation", "file"}))
    which = absl::StrFormat(" = `eval/%s`, %s %s scored, the largest evaluation of the run",
                            (*j)["evaluation"]["file"].get<std::string>(),
                            (*j)["evaluation"].value("scored", Json(0)).dump(),
                            (*j)["evaluation"].value("unit", std::string()));
  std::string out = absl::StrReplaceAll(
      intro, {{"{step}", at(*j, {"step"}) ? (*j)["step"].dump() : "?"}, {"{which}", which}});
  for (auto& [name, v] : (*j)[key].items()) out += row(name, v);
  return out;
}

}  // namespace

std::string eval_tables(const std::string& run_dir) {
  auto load = [&](const char* name) -> absl::StatusOr<Json> {
    const fs::path p = fs::path(RunFolder(run_dir).eval()) / name;
    if (!fs::exists(p)) return absl::NotFoundError(p.string());
    return read_json_file(p.string());
  };
  std::string out = json_section(
      load("nll.json"), "languages",
      "\nHeld-out NLL at step {step} (`eval/nll.json`{which}; twin = the same architecture at its random "
      "initialization):\n\n| language | tokens | nats/token | twin nats/token | twin − model | "
      "bits/byte | twin bits/byte |\n|---|---|---|---|---|---|---|\n",
      [](const std::string& lang, const Json& v) {
        return absl::StrFormat("| %s | %s | %s | %s | %s | %s | %s |\n", lang, num_at(v, {"model", "tokens"}, "%.0f"),
                               num_at(v, {"model", "nats_per_token"}), num_at(v, {"twin", "nats_per_token"}),
                               num_at(v, {"twin_minus_model", "nats_per_token"}), num_at(v, {"model", "bits_per_byte"}),
                               num_at(v, {"twin", "bits_per_byte"}));
      });
  out += json_section(
      load("mc.json"), "tasks",
      "\nZero-shot multiple choice at step {step} (`eval/mc.json`{which}; acc ± stderr, p: exact McNemar "
      "model vs twin):\n\n| task | n | chance | acc | ± | twin acc | acc_norm | twin acc_norm | p |"
      "\n|---|---|---|---|---|---|---|---|---|\n",
      [](const std::string& task, const Json& v) {
        return absl::StrFormat("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", task, num_at(v, {"n"}, "%.0f"),
                               num_at(v, {"chance"}), num_at(v, {"acc"}), num_at(v, {"acc_stderr"}),
                               num_at(v, {"twin", "acc"}), num_at(v, {"acc_norm"}), num_at(v, {"twin", "acc_norm"}),
                               num_at(v, {"paired_acc", "p_value"}));
      });
  return out;
}

absl::StatusOr<SpecialTokens> read_special_tokens(const std::string& tokenizer_json) {
  SpecialTokens sp;
  sp.add_bos = false;  // no tokenizer.json, or one without "framing": the old framing text + eos
  if (!fs::exists(tokenizer_json)) return sp;
  LM_ASSIGN_OR_RETURN(Json j, read_json_file(tokenizer_json));
  if (j.contains("framing")) {
    const Json& f = j["framing"];
    if (!f.is_object() || !f.contains("bos") || !f["bos"].is_boolean())
      return absl::DataLossError(absl::StrCat(tokenizer_json, ": framing.bos: expected true or false (re-run 'lmtrain tokenizer')"));
    sp.add_bos = f["bos"].get<bool>();
  }
  auto id = [&](const char* key, int64_t& out) -> absl::Status {
    if (!j.contains(key)) return absl::OkStatus();
    if (!j[key].is_number_integer())
      return absl::DataLossError(absl::StrCat(tokenizer_json, ": ", key, ": expected an integer"));
    out = j[key].get<int64_t>();
    return absl::OkStatus();
  };
  LM_RETURN_IF_ERROR(id("unk_id", sp.unk_id));
  LM_RETURN_IF_ERROR(id("bos_id", sp.bos_id));
  LM_RETURN_IF_ERROR(id("eos_id", sp.eos_id));
  LM_RETURN_IF_ERROR(id("pad_id", sp.pad_id));
  if (j.contains("pieces") && j["pieces"].is_object()) {
    const Json& p = j["pieces"];
    sp.unk = p.value("unk", sp.unk); sp.bos = p.value("bos", sp.bos);
    sp.eos = p.value("eos", sp.eos); sp.pad = p.value("pad", sp.pad);
  }
  return sp;
}

Json hf_config_json(const model::ModelConfig& c, const SpecialTokens& sp, const std::string& dtype) {
  Json j;
  const bool qwen2 = c.architecture == "qwen2";
  j["architectures"] = {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = qwen2 ? "qwen2" : "llama";
  j["hidden_size"] = c.d_model;
  j["intermediate_size"] = c.d_ff;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim();
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  if (c.rope_scaling.type == "llama3") {
    const auto& r = c.rope_scaling;
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", r.factor}, {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
  }
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_embeddings;
  // -1: the tokenizer has no such token (an imported Qwen2 has no BOS, Llama 3 no PAD).
  auto id_or_null = [](int64_t id) { return id >= 0 ? Json(id) : Json(nullptr); };
  j["bos_token_id"] = id_or_null(sp.bos_id);
  j["eos_token_id"] = id_or_null(sp.eos_id);
  j["pad_token_id"] = id_or_null(sp.pad_id);
  j["torch_dtype"] = dtype == "bf16" ? "bfloat16" : "float32";
  j["hidden_act"] = "silu";
  if (!qwen2) j["attention_bias"] = false;  // Qwen2's q/k/v biases are implied by its architecture
  j["attention_dropout"] = 0.0;
  j["mlp_bias"] = false;
  j["initializer_range"] = c.init_std;
  j["pretraining_tp"] = 1;
  j["use_cache"] = true;
  j["transformers_version"] = "4.40.0";
  return j;
}

namespace {

// The card's YAML header: the Hub's metadata, with the license the exporter named (or "unknown").
std::string card_header(const ExportOptions& opt) {
  return absl::StrFormat("---\nlibrary_name: transformers\npipeline_tag: text-generation\nlicense: %s\nlanguage:\n- bn\n"
                         "- en\n---\n\n",
                         opt.license.empty() ? "unknown" : opt.license);
}

// The training data as a reader needs it: folder names and ids, never this machine's paths.
std::string card_data(const Json& run_cfg) {
  if (!run_cfg.contains("data") || !run_cfg["data"].is_object()) return "";
  const Json& d = run_cfg["data"];
  auto name = [](const Json& path) { return fs::path(path.get<std::string>()).filename().string(); };
  std::string s;
  if (d.contains("shards") && d["shards"].is_string())
    s += "Data: token shards `" + name(d["shards"]) + "`" +
         (d.contains("shards_id") ? " (shards id `" + d["shards_id"].get<std::string>() + "`)" : std::string());
  if (d.contains("earlier_shards") && d["earlier_shards"].is_array())
    for (const auto& e : d["earlier_shards"])
      if (e.is_string()) s += ", continued from `" + name(e) + "`";
  if (d.contains("tokenizer") && d["tokenizer"].is_string()) s += "; tokenizer `" + name(d["tokenizer"]) + "`";
  if (run_cfg.contains("tokenizer_hash") && run_cfg["tokenizer_hash"].is_string())
    s += " (hash `" + run_cfg["tokenizer_hash"].get<std::string>() + "`)";
  return s.empty() ? s : s + ".\n\n";
}

std::string card_use(const ExportOptions& opt) {
  const std::string folder = fs::path(opt.out).lexically_normal().filename().string();
  return "\n## Use\n\n```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
         "path = \"" + folder + "\"  # this folder (its path on your machine), or its Hub id once uploaded\n"
         "tok = AutoTokenizer.from_pretrained(path)\nmodel = AutoModelForCausalLM.from_pretrained(path)\n"
         "ids = tok(\"বাংলা ভাষা\", return_tensors=\"pt\").input_ids\n"
         "print(tok.decode(model.generate(ids, max_new_tokens=40)[0]))\n```\n";
}

std::string card_license(const ExportOptions& opt) {
  if (!opt.license.empty()) return "\n## License\n\n" + opt.license + " (set at export). The training data's own terms apply.\n";
  return "\n## License\n\nNot set at export (`license: unknown`): `lmtrain export --license ID` writes one "
         "(e.g. apache-2.0; the Hub's list: https://huggingface.co/docs/hub/repositories-licenses). The training "
         "data's own terms apply.\n";
}

std::string model_card(const ExportOptions& opt, const Json& run_cfg, const model::ModelConfig& mc, int64_t step,
                       const Json& trainer) {
  const std::string& run_dir = opt.run_dir;
  std::string s = card_header(opt);
  const std::string name = fs::path(run_dir).lexically_normal().filename().string();
  // An imported run's tokenizer is the checkpoint's (hf-tokenizer.json, tokenizer.model), not spm.model.
  const auto tok_model = RunFolder::tokenizer_model_file(RunFolder(run_dir).tokenizer());
  const bool imported = tok_model.ok() && *tok_model != "spm.model";
  s += absl::StrFormat("# %s\n\nA %s causal language model %s with lmforge (C++/LibTorch), exported at step %d.\n\n",
                       name, mc.architecture == "qwen2" ? "Qwen2-architecture" : "Llama-architecture",
                       imported ? "continued from an imported Hugging Face checkpoint" : "pretrained from scratch", step);
  s += "## Model\n\n| field | value |\n|---|---|\n";
  s += absl::StrFormat("| preset | %s |\n| parameters | %s (%d) |\n| layers / d_model / heads / kv heads | %d / %d / %d / %d |\n"
                       "| d_ff (SwiGLU) | %d |\n| context | %d |\n| vocab | %d |\n| tied embeddings | %s |\n| dtype | %s |\n",
                       mc.preset, format_count(static_cast<double>(model::param_count(mc))), model::param_count(mc),
                       mc.n_layers, mc.d_model, mc.n_heads, mc.n_kv_heads, mc.d_ff, mc.max_seq_len, mc.vocab_size,
                       mc.tie_embeddings ? "yes" : "no", opt.dtype);
  s += "\nPrecision: " + precision_note(opt.dtype) + "\n";
  s += "\n## Training\n\n" + card_data(run_cfg);
  s += absl::StrFormat("Tokens seen: %s (%d steps).\n\n", format_count(trainer.value("tokens", 0.0)), trainer.value("step", int64_t{0}));
  if (run_cfg.contains("train")) {
    const Json& t = run_cfg["train"];
    // The card only describes the run: a run folder from before the config sections (flat keys)
    // still exports.
    auto field = [&t](const char* nested, const char* flat) {
      const Json::json_pointer at(nested);
      const Json v = t.contains(at) ? t[at] : t.value(flat, Json());
      return v.is_string() ? v.get<std::string>() : v.dump();  // cosine, not "cosine"
    };
    s += absl::StrFormat("Optimiser AdamW, peak lr %s, schedule %s, batch %s x %s x accum %s, dtype %s.\n\n",
                         field("/optimizer/lr", "lr"), field("/schedule/kind", "schedule"),
                         field("/batch/micro_batch", "micro_batch"), field("/batch/seq_len", "seq_len"),
                         field("/batch/grad_accum", "grad_accum"), field("/hardware/dtype", "dtype"));
  }
  auto metrics = read_metrics(RunFolder(run_dir).metrics());
  if (metrics.ok() && !metrics->empty()) {
    const Json& first = metrics->front();
    const Json& last = metrics->back();
    s += "| | step | tokens | train loss (nats/token) |\n|---|---|---|---|\n";
    s += absl::StrFormat("| first logged | %s | %s | %s |\n", first.value("step", Json()).dump(), first.value("tokens", Json()).dump(), fmt_num(first, "loss"));
    s += absl::StrFormat("| last logged | %s | %s | %s |\n", last.value("step", Json()).dump(), last.value("tokens", Json()).dump(), fmt_num(last, "loss"));
    for (auto it = metrics->rbegin(); it != metrics->rend(); ++it) {
      if (!it->contains("val_loss")) continue;
      s += absl::StrFormat("\nValidation loss at step %s (nats/token):\n\n| language | loss |\n|---|---|\n", (*it)["step"].dump());
      for (auto& [lang, v] : (*it)["val_loss"].items()) s += absl::StrFormat("| %s | %.4f |\n", lang, v.get<double>());
      break;
    }
  }
  const std::string ev = eval_tables(run_dir);
  if (!ev.empty()) s += "\n## Evaluation\n" + ev;
  s += card_use(opt);
  s += "\nRotary embeddings use the rotate_half layout that transformers' Llama expects; no q/k permutation was applied.\n";
  s += card_license(opt);
  return s;
}

// The special tokens as tokenizer_config.json / special_tokens_map.json name them; a token the
// tokenizer does not have (Qwen2's BOS, Llama 3's PAD) is left out.
Json special_tokens_json(const SpecialTokens& sp) {
  Json j = Json::object();
  for (auto [key, text, id] : {std::tuple{"bos_token", &sp.bos, sp.bos_id}, std::tuple{"eos_token", &sp.eos, sp.eos_id},
                               std::tuple{"unk_token", &sp.unk, sp.unk_id}, std::tuple{"pad_token", &sp.pad, sp.pad_id}})
    if (id >= 0 && !text->empty()) j[key] = *text;
  return j;
}

// An imported checkpoint's HF tokenizer.json (hf-tokenizer.json in the run, extended or not) as it
// is: its post-processor already frames a text as the run does (Llama 3: BOS first), which is what
// 'tokenizer --import' read the framing from; the generic fast class loads it unchanged.
absl::Status write_bpe_tokenizer(const fs::path& out, const std::string& bytes, const SpecialTokens& sp,
                                 const model::ModelConfig& mc) {
  LM_RETURN_IF_ERROR(write_file_atomic((out / "tokenizer.json").string(), bytes));
  Json tc = special_tokens_json(sp);
  tc.update({{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", mc.max_seq_len},
             {"clean_up_tokenization_spaces", false}, {"padding_side", "right"}});
  return write_json(out / "tokenizer_config.json", tc);
}

// lmforge's own spm.model (with a tokenizer.json that transformers loads as it is) or an imported
// Llama 2 tokenizer.model, written as tokenizer.model.
absl::Status write_spm_tokenizer(const fs::path& out, const std::string& spm_bytes, const std::string& where,
                                 const SpecialTokens& sp, const model::ModelConfig& mc) {
  LM_RETURN_IF_ERROR(write_file_atomic((out / "tokenizer.model").string(), spm_bytes));
  // tokenizer.json: what AutoTokenizer loads in transformers 5 (tokenizers only). With it the class
  // is the generic PreTrainedTokenizerFast, because LlamaTokenizer would rebuild a BPE model and
  // ignore the file (model/hf_tokenizer.h). Without it (BPE or user-defined pieces) LlamaTokenizer.
  std::string tok_class = "LlamaTokenizer";
  if (auto tj = hf_tokenizer_json(spm_bytes, sp, where); tj.ok()) {
    LM_RETURN_IF_ERROR(write_file_atomic((out / "tokenizer.json").string(), tj->dump()));
    tok_class = "PreTrainedTokenizerFast";
  } else {
    log_warn("no tokenizer.json: %s; transformers will convert tokenizer.model itself (check its ids)",
             std::string(tj.status().message()));
  }
  // add_bos_token is the tokenizer's framing (tokenizer.json "framing.bos"): with bos + text + eos
  // a document starts with BOS in training, so the HF tokenizer adds it; with the old text + eos it
  // does not. add_eos_token false: a prompt is the start of a document, not a whole one.
  // legacy true: the SentencePiece-library classes (transformers 5's SentencePieceBackend, 4.x's
  // slow LlamaTokenizer) then call plain sp.encode; legacy false re-encodes behind an "<unk>" and
  // strips it, which drops the dummy-prefix piece on every line with this vocabulary (checked).
  Json tc = special_tokens_json(sp);
  tc.update({{"tokenizer_class", tok_class}, {"add_bos_token", sp.add_bos}, {"add_eos_token", false},
             {"model_max_length", mc.max_seq_len}, {"clean_up_tokenization_spaces", false},
             {"legacy", true}, {"sp_model_kwargs", Json::object()}, {"padding_side", "right"}});
  return write_json(out / "tokenizer_config.json", tc);
}

}  // namespace

std::string precision_note(const std::string& dtype) {
  if (dtype == "fp32")
    return "fp32 weights, the run's checkpoint as it is: scores on this export (transformers, lm-evaluation-harness "
           "in fp32) agree with lmeval on the run to ~1e-4 nats.";
  return "bf16 weights, rounded from the run's fp32 checkpoint: scores on this export (transformers, "
         "lm-evaluation-harness) differ from lmeval on the run by up to ~0.1 nats per choice and can flip close "
         "items; export with --dtype fp32 to compare item for item (docs/eval.md).";
}

absl::StatusOr<ExportResult> export_hf(const ExportOptions& opt) {
  if (opt.run_dir.empty() || opt.out.empty()) return absl::InvalidArgumentError("export needs --run and --out");
  if (opt.dtype != "bf16" && opt.dtype != "fp32")
    return absl::InvalidArgumentError("--dtype: expected bf16 or fp32, got '" + opt.dtype + "'");
  if (opt.license.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != std::string::npos)
    return absl::InvalidArgumentError("--license '" + opt.license + "': expected a license id such as apache-2.0, mit or "
                                      "cc-by-4.0 (letters, digits, '.', '-', '_'; https://huggingface.co/docs/hub/repositories-licenses)");
  const RunFolder run(opt.run_dir);
  const fs::path out(opt.out);
  LM_RETURN_IF_ERROR(check_export_target(opt.out, /*folder=*/true, opt.force));
  LM_ASSIGN_OR_RETURN(TrainedModel tm, load_trained_model(opt.run_dir, opt.step));
  const Json& run_cfg = tm.run_config;
  const model::ModelConfig& mc = tm.config;
  const std::string& ckpt = tm.checkpoint;
  const Json& trainer = tm.trainer;
  model::Transformer& model = tm.model;

  const fs::path tok_dir = run.tokenizer();
  LM_ASSIGN_OR_RETURN(SpecialTokens sp, read_special_tokens((tok_dir / "tokenizer.json").string()));
  const auto model_file = RunFolder::tokenizer_model_file(tok_dir.string());
  const fs::path tok_file = tok_dir / (model_file.ok() ? *model_file : std::string("spm.model"));
  if (!fs::exists(tok_file))
    return absl::NotFoundError(tok_file.string() + ": the run has no tokenizer copy (re-run 'lmtrain fit', which copies it)");
  LM_ASSIGN_OR_RETURN(const std::string tok_bytes, read_file(tok_file.string()));
  // An imported checkpoint's byte-level BPE: its special tokens by their text, checked before writing.
  std::optional<BpeVocab> bpe;
  if (tok_file.filename() == "hf-tokenizer.json") {
    LM_ASSIGN_OR_RETURN(bpe, read_bpe_vocab(tok_bytes, mc.vocab_size, tok_file.string()));
    sp.bos = bpe_token_text(*bpe, sp.bos_id), sp.eos = bpe_token_text(*bpe, sp.eos_id);
    sp.pad = bpe_token_text(*bpe, sp.pad_id), sp.unk = bpe_token_text(*bpe, sp.unk_id);
  }

  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return absl::InternalError(absl::StrCat(out.string(), ": cannot create: ", ec.message()));
  model::NamedTensors tensors;
  int64_t params = 0;
  for (auto& [name, t] : model::module_state(*model)) {
    params += t.numel();
    tensors.emplace_back(name, t.to(opt.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32).contiguous());
  }
  const std::string st = (out / "model.safetensors").string();
  LM_RETURN_IF_ERROR(model::save_safetensors(st, tensors, {{"format", "pt"}}));
  LM_RETURN_IF_ERROR(write_json(out / "config.json", hf_config_json(mc, sp, opt.dtype)));
  Json gen = {{"_from_model_config", true}, {"do_sample", false}, {"transformers_version", "4.40.0"}};
  for (auto [key, id] : {std::pair{"bos_token_id", sp.bos_id}, {"eos_token_id", sp.eos_id}, {"pad_token_id", sp.pad_id}})
    if (id >= 0) gen[key] = id;
  // No max_length: transformers 5 warns on every generate(max_new_tokens=...) when the file sets one
  // ("Both `max_new_tokens` and `max_length` seem to have been set"); the context is config.json's
  // max_position_embeddings.
  LM_RETURN_IF_ERROR(write_json(out / "generation_config.json", gen));
  if (bpe) {
    LM_RETURN_IF_ERROR(write_bpe_tokenizer(out, tok_bytes, sp, mc));
  } else {
    LM_RETURN_IF_ERROR(write_spm_tokenizer(out, tok_bytes, tok_file.string(), sp, mc));
  }
  LM_RETURN_IF_ERROR(write_json(out / "special_tokens_map.json", special_tokens_json(sp)));
  const int64_t step = trainer["step"].get<int64_t>();
  LM_RETURN_IF_ERROR(write_file_atomic((out / "README.md").string(),
                                       model_card(opt, run_cfg, mc, step, trainer)));
  ExportResult r;
  r.out = out.string();
  r.checkpoint = ckpt;
  r.step = step;
  r.params = params;
  r.bytes = static_cast<int64_t>(fs::file_size(st, ec));
  return r;
}

}  // namespace lm::model
