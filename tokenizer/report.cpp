#include "tokenizer/report.h"

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <unordered_map>

#include <unicode/brkiter.h>
#include <unicode/unistr.h>

#include "absl/strings/str_format.h"
#include "core/log.h"
#include "corpus/corpus.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalize.h"

namespace lm::tokenizer {
namespace {

std::vector<std::string_view> split_words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
    size_t j = i;
    while (j < s.size() && !(s[j] == ' ' || s[j] == '\n' || s[j] == '\t' || s[j] == '\r')) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

double ratio(int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

// Reads documents of a LANG=FILE argument, up to `max_chars` code points.
absl::StatusOr<std::pair<std::string, std::vector<std::string>>> read_eval_text(const std::string& arg,
                                                                               int64_t max_chars) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    return absl::InvalidArgumentError(absl::StrCat("--eval-text ", arg, ": expected LANG=FILE (e.g. bn=heldout.txt)"));
  const std::string lang = arg.substr(0, eq), path = arg.substr(eq + 1);
  const bool jsonl = path.find(".jsonl") != std::string::npos;
  std::vector<std::string> docs;
  int64_t chars = 0;
  LM_RETURN_IF_ERROR(data::for_each_document_in_file(path, jsonl ? "jsonl" : "lines", "text", {},
                                                     [&](const std::string& d) {
                                                       docs.push_back(d);
                                                       chars += data::count_code_points(d);
                                                       return chars >= max_chars ? data::stop_reading()
                                                                                 : absl::OkStatus();
                                                     },
                                                     nullptr));
  return std::make_pair(lang, std::move(docs));
}

std::vector<std::string> cap_chars(const std::vector<std::string>& docs, int64_t max_chars) {
  std::vector<std::string> out;
  int64_t n = 0;
  for (const auto& d : docs) {
    if (n >= max_chars) break;
    out.push_back(d);
    n += data::count_code_points(d);
  }
  return out;
}

// MB/s of encode() over `texts`, repeated until at least `min_s` seconds passed.
double encode_mb_per_s(const Tokenizer& tok, const std::vector<std::string>& texts, int threads, double min_s) {
  int64_t bytes = 0;
  for (const auto& t : texts) bytes += static_cast<int64_t>(t.size());
  if (bytes == 0) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t done = 0;
  double el = 0;
  do {
    auto ids = tok.encode_batch(texts, threads);
    done += bytes;
    el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (el < min_s);
  return done / el / 1e6;
}

}  // namespace

EncoderFns encoder_fns(const Tokenizer& tok) {
  auto t = std::make_shared<Tokenizer>(tok);
  EncoderFns e;
  e.name = "sentencepiece";
  e.encode = [t](std::string_view s) { return t->encode(s); };
  e.decode = [t](const std::vector<int32_t>& ids) { return t->decode(ids); };
  e.is_unk = [t](int32_t id) { return id == t->unk_id(); };
  e.is_byte = [t](int32_t id) { return t->is_byte(id); };
  return e;
}

int64_t count_graphemes(std::string_view utf8) {
  UErrorCode err = U_ZERO_ERROR;
  thread_local std::unique_ptr<icu::BreakIterator> it(icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), err));
  if (!it) return data::count_code_points(utf8);
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())));
  it->setText(u);
  int64_t n = 0;
  for (int32_t p = it->first(); (p = it->next()) != icu::BreakIterator::DONE;) ++n;
  return n;
}

FertilityRow measure_fertility(const EncoderFns& enc, const std::string& lang, const std::string& set,
                               const std::vector<std::string>& texts) {
  FertilityRow r;
  r.encoder = enc.name;
  r.lang = lang;
  r.set = set;
  std::unordered_map<std::string, int> word_tokens;
  for (const auto& raw : texts) {
    const std::string x = canonical(raw);
    const auto ids = enc.encode(x);
    ++r.texts;
    r.code_points += data::count_code_points(x);
    r.graphemes += count_graphemes(x);
    r.bytes += static_cast<int64_t>(x.size());
    r.tokens += static_cast<int64_t>(ids.size());
    for (int32_t id : ids) {
      r.unk += enc.is_unk(id);
      r.byte_tokens += enc.is_byte(id);
    }
    r.roundtrip_exact += enc.decode(ids) == x;
    for (auto w : split_words(x)) {
      ++r.words;
      auto [it, fresh] = word_tokens.try_emplace(std::string(w), 0);
      if (fresh) it->second = static_cast<int>(enc.encode(w).size());
    }
  }
  r.distinct_words = static_cast<int64_t>(word_tokens.size());
  for (const auto& [w, n] : word_tokens) r.distinct_words_split += n > 1;
  r.cp_per_token = ratio(r.code_points, r.tokens);
  r.graphemes_per_token = ratio(r.graphemes, r.tokens);
  r.bytes_per_token = ratio(r.bytes, r.tokens);
  r.tokens_per_word = ratio(r.tokens, r.words);
  r.split_word_share = ratio(r.distinct_words_split, r.distinct_words);
  r.unk_rate = ratio(r.unk, r.tokens);
  r.byte_fallback_rate = ratio(r.byte_tokens, r.tokens);
  r.roundtrip_rate = ratio(r.roundtrip_exact, r.texts);
  return r;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> read_parallel(
    const std::string& path, const std::vector<std::string>& corpora) {
  std::vector<std::pair<std::string, std::string>> out;
  int64_t line = 0;
  absl::Status st = data::for_each_document_in_file(path, "lines", "", {}, [&](const std::string& l) {
    ++line;
    Json j = Json::parse(l, nullptr, false);
    if (!j.is_object() || !j.contains("bn") || !j.contains("en") || !j["bn"].is_string() || !j["en"].is_string())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": document ", line, ": expected a JSON object with string fields \"bn\" and \"en\""));
    if (!corpora.empty()) {
      const std::string name = j.value("corpus", "") + ":" + j.value("split", "");
      if (std::find(corpora.begin(), corpora.end(), name) == corpora.end()) return absl::OkStatus();
    }
    out.emplace_back(j["bn"].get<std::string>(), j["en"].get<std::string>());
    return absl::OkStatus();
  }, nullptr);
  LM_RETURN_IF_ERROR(st);
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no parallel pairs (check --parallel-corpora)"));
  return out;
}

namespace {

using TextSets = std::vector<std::tuple<std::string, std::string, std::vector<std::string>>>;  // set, lang, texts

// The held-out documents of each source of a language with several sources, as set
// "heldout:<source id>": fertility per domain (news, literature, poetry, ...), so a weak one shows.
void add_source_sets(const TrainingSample& sample, int64_t max_chars, TextSets* sets) {
  std::map<std::string, int> sources_per_lang;
  for (const SourceSample& s : sample.sources)
    if (sample.heldout_by_source.count(s.id) && !sample.heldout_by_source.at(s.id).empty()) ++sources_per_lang[s.lang];
  for (const SourceSample& s : sample.sources) {
    if (sources_per_lang[s.lang] < 2 || !sample.heldout_by_source.count(s.id)) continue;
    const auto& docs = sample.heldout_by_source.at(s.id);
    if (!docs.empty()) sets->emplace_back("heldout:" + s.id, s.lang, cap_chars(docs, max_chars));
  }
}

// Per language of the training sample (up to vocab_use_chars of its text): its share of the
// characters and of the tokens, and the pieces its text uses (ids seen at least once) as a share
// of the vocabulary, beside what the allocation gave it.
Json training_mix(const Tokenizer& tok, const TrainingSample& sample, const ReportOptions& o, int threads) {
  const size_t n = sample.langs.size();
  std::vector<double> tpc(n, 0.0);
  std::vector<int64_t> used(n, 0);
  for (size_t l = 0; l < n; ++l) {
    std::vector<std::string> text;
    int64_t chars = 0, tokens = 0;
    for (size_t i = 0; i < sample.sentences.size() && chars < o.vocab_use_chars; ++i) {
      if (sample.sentence_lang[i] != static_cast<int32_t>(l)) continue;
      chars += data::count_code_points(sample.sentences[i]);
      text.push_back(sample.sentences[i]);
    }
    std::vector<char> seen(static_cast<size_t>(tok.vocab_size()), 0);
    for (const auto& ids : tok.encode_batch(text, threads)) {
      tokens += static_cast<int64_t>(ids.size());
      for (int32_t id : ids) seen[static_cast<size_t>(id)] = 1;
    }
    tpc[l] = ratio(tokens, chars);
    used[l] = std::count(seen.begin(), seen.end(), 1);
  }
  double z = 0;
  for (size_t l = 0; l < n; ++l) z += sample.summary.languages[l].char_share * tpc[l];
  Json mix = Json::array();
  for (size_t l = 0; l < n; ++l) {
    const auto& ls = sample.summary.languages[l];
    Json row = {{"lang", ls.lang}, {"weight_share", ls.weight_share}, {"char_share", ls.char_share},
                {"token_share", z > 0 ? ls.char_share * tpc[l] / z : 0.0}, {"chars", ls.chars},
                {"vocab_used", used[l]}, {"vocab_used_share", ratio(used[l], tok.vocab_size())}};
    for (const LangVocab& v : sample.summary.vocab)
      if (v.lang == ls.lang) row["vocab_allocated"] = to_json(v);
    mix.push_back(row);
  }
  return mix;
}

}  // namespace

absl::StatusOr<Json> write_report(const Tokenizer& tok, const TrainingSample& sample, const TrainOptions& recipe,
                                  const ReportOptions& o, const std::string& out_dir,
                                  const std::vector<EncoderFns>& compare) {
  std::vector<EncoderFns> encoders = {encoder_fns(tok)};
  if (!o.encoder_name.empty()) encoders[0].name = o.encoder_name;
  encoders.insert(encoders.end(), compare.begin(), compare.end());
  double baseline_s = 0;
  int baseline_vocab = 0;
  if (o.compare_baseline) {
    const auto t0 = std::chrono::steady_clock::now();
    auto bpe = std::make_shared<ByteBpe>(ByteBpe::train(sample.sentences, static_cast<int>(recipe.vocab_size)));
    baseline_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    baseline_vocab = bpe->vocab_size();
    log_info("baseline gpt2-bpe: %d merges, vocab %d (asked %ld) in %.1f s", bpe->merges(), bpe->vocab_size(),
             recipe.vocab_size, baseline_s);
    EncoderFns e;
    e.name = "gpt2-bpe";
    e.encode = [bpe](std::string_view s) { return bpe->encode(s); };
    e.decode = [bpe](const std::vector<int32_t>& ids) { return bpe->decode(ids); };
    e.is_unk = [](int32_t) { return false; };
    e.is_byte = [](int32_t id) { return id >= ByteBpe::kSpecials + 0x80 && id < ByteBpe::kFirstMerge; };  // non-ASCII single bytes
    encoders.push_back(e);
  }
  // Text sets: held-out documents (or --eval-text), then the parallel sentences.
  TextSets sets;
  for (const auto& lang : sample.langs) {
    auto it = sample.heldout.find(lang);
    if (it != sample.heldout.end() && !it->second.empty())
      sets.emplace_back("heldout", lang, cap_chars(it->second, o.report_chars));
  }
  add_source_sets(sample, o.report_chars, &sets);
  for (const auto& arg : o.eval_texts) {  // named by the file: "eval:bn_social" for bn=dir/bn_social.txt.gz
    LM_ASSIGN_OR_RETURN(auto lt, read_eval_text(arg, o.report_chars));
    std::string stem = arg.substr(arg.find_last_of("/=") + 1);
    stem = stem.substr(0, stem.find('.'));
    sets.emplace_back("eval:" + stem, lt.first, std::move(lt.second));
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  if (!o.parallel.empty()) {
    LM_ASSIGN_OR_RETURN(pairs, read_parallel(o.parallel, o.parallel_corpora));
    std::vector<std::string> bn, en;
    for (auto& [b, e] : pairs) bn.push_back(data::nfc(b)), en.push_back(data::nfc(e));
    sets.emplace_back("parallel", "bn", bn);
    sets.emplace_back("parallel", "en", en);
  }
  Json rows = Json::array();
  std::vector<FertilityRow> all;
  for (const auto& [set, lang, texts] : sets)
    for (const auto& e : encoders) {
      all.push_back(measure_fertility(e, lang, set, texts));
      rows.push_back(to_json(all.back()));
    }
  // Parity: bn tokens / en tokens on the same sentences (1.0 = Bangla costs what English costs).
  Json parity = Json::array();
  for (const auto& e : encoders) {
    if (pairs.empty()) break;
    int64_t tb = 0, te = 0;
    for (const auto& r : all)
      if (r.encoder == e.name && r.set == "parallel") (r.lang == "bn" ? tb : te) += r.tokens;
    parity.push_back({{"encoder", e.name}, {"pairs", pairs.size()}, {"bn_tokens", tb}, {"en_tokens", te},
                      {"bn_over_en", ratio(tb, te)}});
  }
  const int threads = recipe.threads > 0 ? static_cast<int>(recipe.threads)
                                         : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const Json mix = training_mix(tok, sample, o, threads);
  // Encoding speed on all report texts.
  std::vector<std::string> speed_texts;
  for (const auto& [set, lang, texts] : sets) speed_texts.insert(speed_texts.end(), texts.begin(), texts.end());
  const double mbs1 = encode_mb_per_s(tok, speed_texts, 1, 0.5);
  const double mbsn = threads > 1 ? encode_mb_per_s(tok, speed_texts, threads, 0.5) : mbs1;

  Json report = {{"tokenizer_hash", tok.hash()}, {"vocab_size", tok.vocab_size()}, {"icu_version", icu_version()},
                 {"rows", rows}, {"parity", parity}, {"training_mix", mix},
                 {"encode_mb_per_s", {{"threads_1", mbs1}, {"threads", threads}, {"threads_n", mbsn}}},
                 {"training_seconds", sample.summary.seconds},
                 {"long_lines_split", sample.summary.long_lines_split},
                 {"lines_dropped", sample.summary.lines_dropped}};
  if (o.compare_baseline) report["baseline"] = {{"vocab_size", baseline_vocab}, {"train_seconds", baseline_s}};
  LM_RETURN_IF_ERROR(write_json_file(out_dir + "/fertility.json", report));
  if (o.json_stdout) std::printf("%s\n", report.dump(2).c_str());
  if (o.json_stdout || !o.print_table) return report;
  std::printf("\nfertility (vocab %d, ICU %s; cp = code points, gc = grapheme clusters)\n", tok.vocab_size(),
              icu_version().c_str());
  int set_width = 9;
  for (const auto& r : all) set_width = std::max(set_width, static_cast<int>(r.set.size()));
  std::printf("%-14s %-*s %-4s %6s %7s %7s %6s %8s %7s %6s %6s %9s\n", "tokenizer", set_width, "set", "lang", "texts",
              "cp/tok", "gc/tok", "B/tok", "tok/word", "split%", "unk%", "byte%", "roundtrip");
  for (const auto& r : all)
    std::printf("%-14s %-*s %-4s %6ld %7.3f %7.3f %6.2f %8.3f %6.1f%% %5.2f%% %5.2f%% %8.2f%%\n", r.encoder.c_str(),
                set_width, r.set.c_str(), r.lang.c_str(), static_cast<long>(r.texts), r.cp_per_token, r.graphemes_per_token,
                r.bytes_per_token, r.tokens_per_word, 100 * r.split_word_share, 100 * r.unk_rate,
                100 * r.byte_fallback_rate, 100 * r.roundtrip_rate);
  for (const auto& p : parity)
    std::printf("parity %-14s bn/en tokens on %ld parallel pairs: %.3f\n", p["encoder"].get<std::string>().c_str(),
                static_cast<long>(p["pairs"].get<int64_t>()), p["bn_over_en"].get<double>());
  for (const auto& m : mix)
    std::printf("training mix %-4s weights %5.1f%%  chars %5.1f%%  tokens %5.1f%%  vocabulary used %5.1f%% (%ld "
                "pieces)%s\n",
                m["lang"].get<std::string>().c_str(), 100 * m["weight_share"].get<double>(),
                100 * m["char_share"].get<double>(), 100 * m["token_share"].get<double>(),
                100 * m["vocab_used_share"].get<double>(), static_cast<long>(m["vocab_used"].get<int64_t>()),
                m.contains("vocab_allocated")
                    ? absl::StrFormat(", allocated %.1f%%", 100 * m["vocab_allocated"]["share"].get<double>()).c_str()
                    : "");
  std::printf("encode speed: %.2f MB/s on 1 thread, %.2f MB/s on %d threads\n", mbs1, mbsn, threads);
  std::printf("long lines split at sentence ends: %ld, dropped: %ld; report in %s/fertility.json\n",
              static_cast<long>(sample.summary.long_lines_split), static_cast<long>(sample.summary.lines_dropped),
              (o.shown_dir.empty() ? out_dir : o.shown_dir).c_str());
  return report;
}

}  // namespace lm::tokenizer
