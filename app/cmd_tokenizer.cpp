// lmtrain tokenizer: trains the SentencePiece model of the recipe on a corpus manifest and
// prints the fertility report (optionally beside the GPT-2-style byte-level BPE baseline), or
// (--import) makes a tokenizer folder of an HF checkpoint's own tokenizer.
#include <cstdio>

#include "app/commands.h"
#include "app/tokenizer_sweep.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "corpus/corpus.h"
#include "tokenizer/extend.h"
#include "tokenizer/import_hf.h"
#include "tokenizer/report.h"
#include "tokenizer/train.h"

namespace lm::app {
namespace {

struct TokenizerCmd {
  std::string corpus, out, config;
  std::string import_dir;  // an HF checkpoint folder whose tokenizer to import
  tokenizer::ExtendOptions extend;  // --extend BASE_TOK: a vocabulary extension of it
  bool force = false;  // replace an existing tokenizer folder
  tokenizer::TrainOptions recipe;
  tokenizer::ReportOptions report;
  std::vector<int64_t> sweep;  // vocabulary sizes: one tokenizer each into out/vocab-N/ and a table
};

constexpr const char* kImportHelp =
    "an HF checkpoint folder: its own tokenizer (tokenizer.json byte-level BPE, e.g. Llama 3 and Qwen2, or "
    "tokenizer.model SentencePiece, e.g. Llama 2) with its BOS/EOS and vocab size, into --out (docs/tokenizer.md)";

absl::Status run_import(const TokenizerCmd& c) {
  LM_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::import_hf_tokenizer({c.import_dir, c.out, c.force}));
  log_info("wrote %s: %s tokenizer of %s (vocab %d, %d ids in the model, hash %s), documents as %s, bos %d, eos %d",
           c.out, tok.type(), c.import_dir, tok.vocab_size(), tok.model_vocab_size(), tok.hash(),
           tok.framing().describe(), tok.bos_id(), tok.eos_id());
  return absl::OkStatus();
}

absl::Status run_extend(TokenizerCmd& c, CLI::App* sub) {
  tokenizer::ExtendOptions& e = c.extend;
  e.corpus = c.corpus, e.out = c.out, e.force = c.force, e.report = c.report;
  if (sub->count("--sample-chars") > 0) e.sample_chars = c.recipe.sample_chars;
  if (sub->count("--heldout-every") > 0) e.heldout_every = c.recipe.heldout_every;
  LM_ASSIGN_OR_RETURN(tokenizer::ExtendResult r, tokenizer::extend_tokenizer(e));
  log_info("wrote %s: %s extended by %ld tokens (%ld learned, %ld pruned as unreachable), vocab %d -> %d, split %s, "
           "hash %s, in %s",
           c.out, e.base, static_cast<long>(r.learned - r.pruned), static_cast<long>(r.learned),
           static_cast<long>(r.pruned), r.base.vocab_size(), r.extended.vocab_size(), r.split, r.extended.hash(),
           format_duration(r.seconds));
  return absl::OkStatus();
}

absl::Status run_tokenizer(TokenizerCmd& c, CLI::App* sub) {
  if (!c.extend.base.empty()) {
    if (!c.import_dir.empty()) return absl::InvalidArgumentError("--import and --extend: give one");
    return run_extend(c, sub);
  }
  if (!c.import_dir.empty()) {
    if (!c.corpus.empty()) return absl::InvalidArgumentError("--import and --corpus: give one (import or train)");
    return run_import(c);
  }
  if (c.corpus.empty())
    return absl::InvalidArgumentError("--corpus: required to train a tokenizer (or --import HF_DIR to import one)");
  if (!c.config.empty()) {
    // Precedence: defaults < config file < flags given on the command line.
    tokenizer::TrainOptions from_file;
    LM_RETURN_IF_ERROR(load_config_file(c.config, from_file));
    Json flags = to_json(c.recipe), merged = to_json(from_file);
    for (auto it = flags.begin(); it != flags.end(); ++it) {
      std::string opt = "--" + it.key();
      for (auto& ch : opt) ch = ch == '_' ? '-' : ch;
      if (sub->get_option_no_throw(opt) != nullptr && sub->count(opt) > 0) merged[it.key()] = it.value();
    }
    LM_RETURN_IF_ERROR(from_json(merged, c.recipe, c.config));
  }
  c.recipe.threads = global_options().threads;
  // Before reading any text: shards and runs name this folder, and a re-trained tokenizer would
  // silently invalidate them.
  LM_RETURN_IF_ERROR(check_new_output(c.out, c.force, "a tokenizer"));
  LM_ASSIGN_OR_RETURN(data::CorpusManifest manifest, data::load_manifest(c.corpus));
  log_info("reading %s (%d sources), sample of %s chars", c.corpus, (int)manifest.sources.size(),
           format_count(static_cast<double>(c.recipe.sample_chars)));
  LM_ASSIGN_OR_RETURN(tokenizer::TrainingSample sample, tokenizer::build_sample(manifest, c.recipe));
  for (const auto& l : sample.summary.languages)
    log_info("  %-4s %s chars (%.1f%% of the sample, weights ask %.1f%%), %ld docs, %ld held out", l.lang,
             format_count(static_cast<double>(l.chars)), 100 * l.char_share, 100 * l.weight_share, l.documents,
             static_cast<long>(sample.heldout[l.lang].size()));
  log_detail("  %ld sentences; %ld long lines split at sentence ends (longer than %ld bytes), %ld dropped",
           sample.summary.sentences, sample.summary.long_lines_split, c.recipe.max_sentence_length,
           sample.summary.lines_dropped);
  if (sample.summary.invalid_utf8_skipped > 0)
    log_warn("skipped %ld lines with invalid UTF-8", sample.summary.invalid_utf8_skipped);
  if (!c.sweep.empty()) return run_tokenizer_sweep(sample, c.recipe, c.report, c.sweep, c.out);
  log_info("training %s, vocab %ld ...", c.recipe.model_type, c.recipe.vocab_size);
  tokenizer::SampleSummary summary = sample.summary;
  LM_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::train_tokenizer(sample, c.recipe, c.out, &summary));
  sample.summary = summary;
  log_info("wrote %s/spm.model (vocab %d, hash %s) in %.1f s", c.out, tok.vocab_size(), tok.hash(), summary.seconds);
  return tokenizer::write_report(tok, sample, c.recipe, c.report, c.out).status();
}

// Its own examples: without a footer a subcommand's --help ends with lmtrain's global ones.
constexpr const char* kExamples =
    "Examples:\n"
    "  lmtrain tokenizer --corpus corpus.json --vocab-size 32000 --out tok/\n"
    "  lmtrain tokenizer --corpus corpus.json --vocab-size 32000 --out tok/ --compare-baseline\n"
    "  lmtrain tokenizer --corpus corpus.json --vocab-size 8000 --model-type bpe --out tok-bpe/ --force\n"
    "  lmtrain tokenizer --corpus corpus.json --out tok/ --config recipe.json --json > fertility.json\n"
    "  lmtrain tokenizer --import Llama-3.2-1B/ --out tok-llama3/\n"
    "  lmtrain tokenizer --extend tok-llama3/ --corpus bn.json --add 32000 --split llama3-marks --out tok-ext/ \\\n"
    "      --parallel bn_en_parallel.jsonl.gz --parallel-corpora SUPara-benchmark:test2018,SIPC:test\n"
    "  lmtrain tokenizer --extend Llama-2-7b-hf/ --corpus bn.json --add 16000 --out tok-llama2-ext/\n"
    "Then: lmtrain prepare --corpus corpus.json --tokenizer tok/ --out shards/ (docs/tokenizer.md).";

// --extend and its options (tokenizer/extend.h).
void add_extend_options(CLI::App* sub, tokenizer::ExtendOptions& e) {
  sub->add_option("--extend", e.base,
                  "a tokenizer folder made by --import (or an HF checkpoint folder): learn up to --add new BPE "
                  "tokens for Bangla on --corpus, appended after its ids (docs/tokenizer.md, \"Vocabulary extension\"); "
                  "a SentencePiece base (Llama 2's tokenizer.model) gets new pieces scored after all of its own");
  sub->add_option("--add", e.add, "--extend: new tokens at most");
  sub->add_option("--split", e.split,
                  "--extend: the split pattern, which keeps combining marks in words: llama3-marks (Llama 3 bases; "
                  "not GGUF-exportable), qwen35 (Qwen2 bases; llama.cpp's qwen35), gpt-4o (llama.cpp's gpt-4o; "
                  "~1% of English lines change); a SentencePiece base keeps its own whitespace words")
      ->capture_default_str();
  sub->add_option("--guard", e.guard,
                  "--extend: what a new token must hold, so text without it tokenizes exactly as the base: "
                  "auto (bengali for a SentencePiece base, else marks+bengali), "
                  "marks+bengali (a combining mark or a Bengali letter), marks (a combining mark; mark-free Bangla "
                  "then stays as the base has it too, and Bangla gains far less) or bengali (a combining mark or any "
                  "Bengali-block character: Bengali digits change too; for Llama 2, which spells them in bytes)")
      ->capture_default_str();
  sub->add_option("--min-count", e.min_count, "--extend: a pair seen fewer times gets no token")
      ->capture_default_str();
}

}  // namespace

void add_tokenizer(CLI::App& app, Registry& reg) {
  auto c = std::make_shared<TokenizerCmd>();
  CLI::App* sub = app.add_subcommand("tokenizer", "train the tokenizer and print its fertility report, or import one");
  auto& r = c->recipe;
  sub->add_option("--corpus", c->corpus, "corpus manifest (corpus.json) to train on");
  sub->add_option("--import", c->import_dir, kImportHelp);
  add_extend_options(sub, c->extend);
  sub->add_option("--out", c->out, "output folder (spm.model, tokenizer.json, fertility.json)")->required();
  sub->add_option("--config", c->config, "JSON file with recipe options (flags override it)");
  sub->add_flag("--force", c->force, "replace the tokenizer in an existing, non-empty --out folder");
  sub->add_option("--vocab-size", r.vocab_size, "pieces incl. specials and 256 byte pieces")->capture_default_str();
  sub->add_option("--model-type", r.model_type, "unigram or bpe")->capture_default_str();
  sub->add_option("--character-coverage", r.character_coverage, "share of characters with their own piece")
      ->capture_default_str();
  sub->add_option("--byte-fallback", r.byte_fallback, "unseen characters become byte pieces (no UNK)")
      ->capture_default_str();
  sub->add_option("--split-digits", r.split_digits, "one piece per digit")->capture_default_str();
  sub->add_option("--require-bengali", r.require_bengali, "every Bengali character seen is a required char")
      ->capture_default_str();
  sub->add_option("--vocab-allocation", r.vocab_allocation,
                  "per-language: a unigram model per language on its own text with its share of the vocabulary "
                  "(--language-vocab), merged into one model (a bpe model is joint); joint: one model on the mixed "
                  "sample")
      ->check(CLI::IsMember({"per-language", "joint"}))
      ->capture_default_str();
  sub->add_option("--language-vocab", r.language_vocab,
                  "shares of the vocabulary per language, e.g. bn:0.6,en:0.4 (default: the sample's character shares)");
  sub->add_option("--max-sentence-length", r.max_sentence_length,
                  "bytes; longer lines are split at sentence ends, never dropped")->capture_default_str();
  sub->add_option("--max-piece-length", r.max_piece_length, "code points per piece")->capture_default_str();
  sub->add_option("--sample-chars", r.sample_chars, "training sample size in code points (by manifest weights)")
      ->capture_default_str();
  sub->add_option("--sample-spread", r.sample_spread,
                  "a source with more text than its share is read up to this many times its share and sampled "
                  "evenly over it (0: its whole length, 1: its first documents)")
      ->capture_default_str();
  sub->add_option("--fill", r.fill,
                  "where a short source's share comes from: same-language (its language's other sources; a short "
                  "language shrinks the sample, keeping the language mix), other-languages (any source: the size "
                  "holds, the language mix does not), none (every source cut alike)")
      ->check(CLI::IsMember({"same-language", "other-languages", "none"}))
      ->capture_default_str();
  sub->add_option("--heldout-every", r.heldout_every, "hold out every N-th document per language (0 = none)")
      ->capture_default_str();
  sub->add_flag("--dedup,!--no-dedup", r.dedup,
                "drop exact duplicate documents before sampling; on by default, as in 'lmtrain prepare'; "
                "--no-dedup (CLI11 shows it as {false}) keeps them")
      ->capture_default_str();
  sub->add_flag("--skip-invalid-utf8", r.skip_invalid_utf8, "skip and count lines with invalid UTF-8 (default: error)");
  sub->add_option("--seed-sentencepiece-size", r.seed_sentencepiece_size, "unigram seed pieces")->capture_default_str();
  sub->add_option("--shrinking-factor", r.shrinking_factor, "unigram pruning keep share")->capture_default_str();
  sub->add_option("--num-sub-iterations", r.num_sub_iterations, "unigram EM sub-iterations")->capture_default_str();
  auto& p = c->report;
  sub->add_flag("--compare-baseline", p.compare_baseline,
                "also train a GPT-2-style byte-level BPE at the same vocab and report it side by side");
  sub->add_option("--eval-text", p.eval_texts,
                  "more text to measure, LANG=FILE (one document per line or .jsonl, .gz ok), reported as set "
                  "eval:<file name>, beside the held-out documents");
  sub->add_option("--parallel", p.parallel, "parallel JSONL {bn, en} for bn/en parity (.gz ok)");
  sub->add_option("--parallel-corpora", p.parallel_corpora,
                  "keep only these corpus:split pairs of --parallel (e.g. SUPara-benchmark:test2018,SIPC:test)")
      ->delimiter(',');
  sub->add_option("--report-chars", p.report_chars, "code points of held-out text per language in the report")
      ->capture_default_str();
  sub->add_option("--sweep", c->sweep,
                  "vocabulary sizes, e.g. 16000,32000,48000,64000: one tokenizer each into OUT/vocab-N/ on the same "
                  "sample, and a table of fertility, parity, speed and embedding parameters per preset")
      ->delimiter(',');
  sub->add_flag("--json", p.json_stdout, "print fertility.json to stdout instead of the table");
  sub->footer(kExamples);
  add_global_flags(sub);
  reg.push_back({sub, [c, sub] { return run_tokenizer(*c, sub); }});
}

}  // namespace lm::app
