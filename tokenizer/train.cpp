#include "tokenizer/train.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "tokenizer/merge.h"
#include "tokenizer/model_proto.h"
#include "tokenizer/normalize.h"

namespace lm::tokenizer {
namespace {

// UTF-8 decode of one code point at s[i] (valid input); advances i.
uint32_t next_cp(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_cont(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

absl::Status make_dir(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        return absl::PermissionDeniedError(absl::StrCat(cur, ": cannot create folder (", strerror(errno), ")"));
    }
    if (i < dir.size()) cur += dir[i];
  }
  return absl::OkStatus();
}

// ---- Portable identity: spm.model without the facts of where and how fast it was trained ----
// SentencePiece records the rule file's path (NormalizerSpec.normalization_rule_tsv, our --out
// folder) and the trainer's thread count (TrainerSpec.num_threads) in the model, so the same
// tokenizer trained into `tok8k/` and `tok8k` had other bytes and so another hash (the thread
// count is dropped too; whether training itself is thread-independent is SentencePiece's matter). Those fields are informational when loading (the rules are compiled into
// precompiled_charsmap), so they are dropped from the serialized ModelProto (protobuf wire format,
// https://protobuf.dev/programming-guides/encoding/; field numbers from sentencepiece_model.proto).
constexpr int kTrainerSpec = 2, kNormalizerSpec = 3, kDenormalizerSpec = 5;
constexpr int kTrainerInput = 1, kTrainerModelPrefix = 2, kTrainerNumThreads = 16, kNormalizerRuleTsv = 6;

}  // namespace

std::string portable_model_bytes(const std::string& model) {
  auto inner = [](int field, std::string* payload) {
    std::set<int> drop;
    if (field == kTrainerSpec) drop = {kTrainerInput, kTrainerModelPrefix, kTrainerNumThreads};
    if (field == kNormalizerSpec || field == kDenormalizerSpec) drop = {kNormalizerRuleTsv};
    if (drop.empty()) return false;
    std::string out;
    if (!wire::filter_message(*payload, drop, [](int, std::string*) { return false; }, &out)) return false;
    *payload = std::move(out);
    return true;
  };
  std::string out;
  return wire::filter_message(model, {}, inner, &out) ? out : model;
}

int split_long_line(std::string_view line, size_t max_bytes, std::vector<std::string>* out) {
  int pieces = 0;
  while (line.size() > max_bytes) {
    size_t cut = std::string::npos;
    const std::string_view window = line.substr(0, max_bytes);
    // Sentence end: danda, ? ! or '.' followed by a space; cut after the space.
    for (size_t i = window.size(); i-- > 1;) {
      if (window[i] != ' ') continue;
      const std::string_view before = window.substr(0, i);
      if (ends_with(before, "\xE0\xA5\xA4") || ends_with(before, "?") || ends_with(before, "!") ||
          ends_with(before, ".")) {
        cut = i + 1;
        break;
      }
    }
    if (cut == std::string::npos) {
      const size_t sp = window.rfind(' ');
      if (sp != std::string::npos && sp > 0) cut = sp + 1;
    }
    if (cut == std::string::npos) {
      cut = max_bytes;
      while (cut > 0 && is_cont(line[cut])) --cut;
      if (cut == 0) cut = max_bytes;
    }
    std::string_view piece = line.substr(0, cut);
    while (!piece.empty() && piece.back() == ' ') piece.remove_suffix(1);
    if (!piece.empty()) {
      out->emplace_back(piece);
      ++pieces;
    }
    line.remove_prefix(cut);
  }
  if (!line.empty()) {
    out->emplace_back(line);
    ++pieces;
  }
  return pieces;
}

std::unordered_map<std::string, std::string> spm_kwargs(const TrainOptions& o, const std::string& required_chars,
                                                        const std::string& rule_tsv_path) {
  const int threads = o.threads > 0 ? static_cast<int>(o.threads)
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::unordered_map<std::string, std::string> kw = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", absl::StrFormat("%.6g", o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"split_digits", o.split_digits ? "true" : "false"},
      {"max_sentence_length", std::to_string(o.max_sentence_length)},
      {"max_sentencepiece_length", std::to_string(o.max_piece_length)},
      {"seed_sentencepiece_size", std::to_string(o.seed_sentencepiece_size)},
      {"shrinking_factor", absl::StrFormat("%.6g", o.shrinking_factor)},
      {"num_sub_iterations", std::to_string(o.num_sub_iterations)},
      {"num_threads", std::to_string(threads)},
      {"normalization_rule_tsv", rule_tsv_path},
      // Exact round trip: keep every space as it is (the default collapses runs and trims).
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "true"},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      {"pad_id", std::to_string(kPadId)},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"train_extremely_large_corpus", "false"},
  };
  if (!required_chars.empty()) kw["required_chars"] = required_chars;
  return kw;
}

namespace {

// "the sample has 110k characters in 2.3k sentences: 'news' 60k (bn), 'small' 50k (bn, all it has)".
std::string describe_sample(const TrainingSample& sample) {
  int64_t chars = 0;
  for (const auto& l : sample.summary.languages) chars += l.chars;
  std::string s = absl::StrFormat("the sample has %s characters in %s sentences",
                                  format_count(static_cast<double>(chars)),
                                  format_count(static_cast<double>(sample.sentences.size())));
  for (size_t i = 0; i < sample.sources.size(); ++i) {
    const SourceSample& src = sample.sources[i];
    absl::StrAppend(&s, i ? ", " : ": ", "'", src.id, "' ", format_count(static_cast<double>(src.chars)), " (",
                    src.lang, src.exhausted && src.read_chars < src.asked_chars ? ", all it has" : "", ")");
  }
  return s;
}

// The Bengali code points (U+0980-U+09FF) the sentences hold, as SentencePiece's required_chars.
std::string required_bengali(const std::vector<std::string>& sentences) {
  std::set<uint32_t> seen;
  for (const auto& s : sentences) {
    for (size_t i = 0; i < s.size();) {
      uint32_t cp = next_cp(s, i);
      if (cp >= 0x0980 && cp <= 0x09FF) seen.insert(cp);
    }
  }
  std::string required;
  for (uint32_t cp : seen) {
    char buf[4] = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                   static_cast<char>(0x80 | (cp & 0x3F)), 0};
    required.append(buf, 3);
  }
  return required;
}

absl::Status train_failed(const std::string& error, const TrainingSample& sample, const TrainOptions& o,
                          const std::string& lang) {
  return absl::InvalidArgumentError(absl::StrCat(
      "SentencePiece training failed", lang.empty() ? "" : " on the '" + lang + "' text", ": ", error, " (",
      describe_sample(sample), "; a vocabulary too large for the sample fails here: lower --vocab-size (now ",
      o.vocab_size, ") or add text to the short sources)"));
}

// Each language's share of the sample's code points: the summary's (build_sample counts the lines
// before long ones are split), or counted from the sentences for a sample built in code.
std::map<std::string, double> sample_char_shares(const TrainingSample& sample, const SampleSummary& summary) {
  std::map<std::string, double> shares;
  for (const LangSample& l : summary.languages) shares[l.lang] = l.char_share;
  if (shares.size() == sample.langs.size()) return shares;
  shares.clear();
  std::vector<double> chars(sample.langs.size(), 0.0);
  double total = 0;
  for (size_t i = 0; i < sample.sentences.size(); ++i) {
    const auto c = static_cast<double>(data::count_code_points(sample.sentences[i]));
    chars[static_cast<size_t>(sample.sentence_lang[i])] += c;
    total += c;
  }
  for (size_t l = 0; l < sample.langs.size(); ++l) shares[sample.langs[l]] = total > 0 ? chars[l] / total : 0.0;
  return shares;
}

// The languages' shares of the vocabulary: o.language_vocab ("bn:0.6,en:0.4", normalized) or
// each language's share of the sample's characters.
absl::StatusOr<std::map<std::string, double>> language_vocab_shares(const TrainOptions& o, const TrainingSample& sample,
                                                                    const std::map<std::string, double>& char_shares) {
  if (o.language_vocab.empty()) return char_shares;
  std::map<std::string, double> shares;
  double sum = 0;
  for (absl::string_view part : absl::StrSplit(o.language_vocab, ',')) {
    const std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits(':', 1));
    double v = 0;
    if (!absl::SimpleAtod(kv.second, &v) || !(v > 0) || shares.count(kv.first))
      return absl::InvalidArgumentError(absl::StrCat("language_vocab: '", part, "' in '", o.language_vocab,
                                                     "': expected LANG:SHARE with SHARE > 0, each language once "
                                                     "(e.g. bn:0.6,en:0.4)"));
    shares[kv.first] = v;
    sum += v;
  }
  for (const std::string& lang : sample.langs)
    if (!shares.count(lang))
      return absl::InvalidArgumentError(absl::StrCat("language_vocab: '", o.language_vocab, "' gives no share to '",
                                                     lang, "', a language of the sample"));
  if (shares.size() != sample.langs.size())
    return absl::InvalidArgumentError(absl::StrCat("language_vocab: '", o.language_vocab,
                                                   "' names a language the sample does not hold"));
  for (auto& [lang, v] : shares) v /= sum;
  return shares;
}

// One unigram model per language on its own sentences, sized to its share of the vocabulary (with
// slack: pieces such as digits and punctuation are shared, and the merge takes exactly
// vocab_size), merged into one model (tokenizer/merge.h).
absl::StatusOr<std::string> train_per_language(const TrainingSample& sample, const TrainOptions& o,
                                               std::unordered_map<std::string, std::string> kwargs,
                                               SampleSummary* summary) {
  const std::map<std::string, double> char_shares = sample_char_shares(sample, *summary);
  LM_ASSIGN_OR_RETURN(const auto shares, language_vocab_shares(o, sample, char_shares));
  const int64_t meta = 4 + (o.byte_fallback ? 256 : 0), room = o.vocab_size - meta;
  std::vector<LanguageModel> models;
  for (size_t l = 0; l < sample.langs.size(); ++l) {
    const std::string& lang = sample.langs[l];
    std::vector<std::string> text;
    for (size_t i = 0; i < sample.sentences.size(); ++i)
      if (sample.sentence_lang[i] == static_cast<int32_t>(l)) text.push_back(sample.sentences[i]);
    const double share = shares.at(lang);
    kwargs["vocab_size"] = std::to_string(meta + static_cast<int64_t>(std::ceil(share * room * 1.08)) + 64);
    kwargs["hard_vocab_limit"] = "false";  // a small text gives what it can; the merge says when the union is short
    // Each model requires the Bengali characters of its own text (the merge keeps every character
    // piece of every model): an English model made to hold every Bengali letter of the whole sample
    // failed at small vocabularies (--vocab-size 512 on data/sample: 406 pieces for 444 required).
    kwargs.erase("required_chars");
    if (o.require_bengali) {
      const std::string required = required_bengali(text);
      if (!required.empty()) kwargs["required_chars"] = required;
    }
    log_detail("training the '%s' model: %s sentences, %.1f%% of the vocabulary", lang,
             format_count(static_cast<double>(text.size())), 100 * share);
    std::string model, error;
    if (!bridge::train(kwargs, text, &model, &error)) return train_failed(error, sample, o, lang);
    models.push_back({lang, std::move(model), char_shares.at(lang), share});
  }
  std::vector<MergedLanguage> merged;
  absl::StatusOr<std::string> model = merge_unigram_models(models, o.vocab_size, &merged);
  if (!model.ok()) return train_failed(std::string(model.status().message()), sample, o, "");
  summary->vocab.clear();
  for (const MergedLanguage& m : merged)
    summary->vocab.push_back({m.lang, shares.at(m.lang), m.trained, m.kept, m.shared});
  return *model;
}

}  // namespace

absl::StatusOr<Tokenizer> train_tokenizer(const TrainingSample& sample, const TrainOptions& o,
                                          const std::string& out_dir, SampleSummary* summary) {
  if (o.model_type != "unigram" && o.model_type != "bpe")
    return absl::InvalidArgumentError("model_type: expected unigram or bpe, got '" + o.model_type + "'");
  if (o.vocab_allocation != "per-language" && o.vocab_allocation != "joint")
    return absl::InvalidArgumentError("vocab_allocation: expected per-language or joint, got '" + o.vocab_allocation +
                                      "' (--vocab-allocation)");
  // Per-language merges unigram models: one language, or a BPE model, is trained jointly (said once).
  const bool per_language = o.vocab_allocation == "per-language" && sample.langs.size() > 1 && o.model_type == "unigram";
  if (o.vocab_allocation == "per-language" && sample.langs.size() > 1 && !per_language)
    log_info("vocab_allocation per-language merges unigram models; the %s model is trained on the mixed sample (joint)",
             o.model_type);
  if (o.vocab_size < 300) return absl::InvalidArgumentError("vocab_size: must be at least 300 (260 specials+bytes)");
  LM_RETURN_IF_ERROR(make_dir(out_dir));
  const std::string tsv_path = out_dir + "/normalization.tsv";
  LM_RETURN_IF_ERROR(write_file_atomic(tsv_path, nfc_rule_tsv()));
  const std::string required = o.require_bengali ? required_bengali(sample.sentences) : "";
  summary->required_chars = static_cast<int64_t>(required.size() / 3);
  auto kwargs = spm_kwargs(o, required, tsv_path);
  bridge::set_log_level(output_options().quiet ? 2 : 1);
  const auto t0 = std::chrono::steady_clock::now();
  std::string model, error;
  if (per_language) {
    LM_ASSIGN_OR_RETURN(model, train_per_language(sample, o, kwargs, summary));
  } else if (!bridge::train(kwargs, sample.sentences, &model, &error)) {
    return train_failed(error, sample, o, "");
  }
  summary->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  model = portable_model_bytes(model);  // the hash names the content, not the folder or --threads
  LM_RETURN_IF_ERROR(write_file_atomic(out_dir + "/" + kModelFile, model));
  LM_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_model_bytes(model, out_dir + "/" + kModelFile));
  TokenizerMeta meta;
  meta.model_type = o.model_type;
  meta.hash = tok.hash();
  meta.vocab_size = tok.vocab_size();
  meta.unk_id = tok.unk_id();
  meta.bos_id = tok.bos_id();
  meta.eos_id = tok.eos_id();
  meta.pad_id = tok.pad_id();
  meta.icu_version = icu_version();
  meta.framing = kFraming;  // recorded explicitly: a tokenizer.json without it reads as the old framing
  meta.recipe = o;
  meta.training = *summary;
  LM_RETURN_IF_ERROR(write_json_file(out_dir + "/" + kMetaFile, to_json(meta)));
  return Tokenizer::load(out_dir);
}

}  // namespace lm::tokenizer
