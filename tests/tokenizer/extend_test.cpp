// Vocabulary extension ('lmtrain tokenizer --extend', tokenizer/extend.h): the split patterns that
// keep combining marks in words, the guard, the merge trainer, and a small extension of the real
// Llama 3 and Qwen2 vocabularies (a few hundred merges on the Bangla sample) checked for: base and
// special ids unchanged, English and code-like text encoded exactly as the base, every new id
// reachable, base pieces, refusals that write nothing, and (label hf) HF tokenizers' ids on the
// written hf-tokenizer.json. The vocabularies come from tests/tokenizer/make_hf_vocabs.py
// (~/.cache/lmforge/vocabs); the tests that need them skip without them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "core/config.h"
#include "core/file.h"
#include "tokenizer/extend.h"
#include "tokenizer/extend_merges.h"
#include "tokenizer/import_hf.h"
#include "tokenizer/model_proto.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/spm_words.h"

namespace fs = std::filesystem;
using namespace lm::tokenizer;

namespace {

const std::string kShared = std::string(LM_SOURCE_DIR) + "/../shared/data";

std::string vocab_dir(const std::string& name) {
  if (const char* e = std::getenv("LM_VOCAB_CACHE"); e && *e) return std::string(e) + "/" + name;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/lmforge/vocabs/" + name;
}

fs::path tmp_path() { return fs::temp_directory_path() / ("extend_test_" + std::to_string(::getpid())); }

std::string tmp_dir() {
  static const std::string d = [] {
    fs::remove_all(tmp_path());
    fs::create_directories(tmp_path());
    return tmp_path().string();
  }();
  return d;
}

// The extended folders (~20 MB each) go when the binary ends.
struct RemoveTmpDir : ::testing::Environment {
  void TearDown() override { fs::remove_all(tmp_path()); }
};
[[maybe_unused]] const auto* const kRemoveTmpDir = ::testing::AddGlobalTestEnvironment(new RemoveTmpDir);

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

std::vector<std::string> pieces(const Splitter& s, const std::string& text) {
  std::vector<Span> spans;
  s.split(text, &spans);
  std::vector<std::string> out;
  for (const Span& sp : spans) out.push_back(text.substr(sp.begin, sp.end - sp.begin));
  return out;
}

// English, code and numbers: no combining mark anywhere.
std::vector<std::string> mark_free_lines() {
  std::vector<std::string> lines = read_lines(kShared + "/sample/en_2000.txt");
  for (const char* code :
       {"int main(int argc, char** argv) { return argc > 1 ? 0 : -1; }", "for (auto& [k, v] : map_) v += 1e-3;",
        "def f(x):\n    return {'a': x ** 2, \"b\": [1, 2, 3]}\n", "SELECT id, name FROM users WHERE age >= 21;",
        "x = 1234567890 + 0.5e10 - 3_000_000; // it's done\r\n", "    \t  indented\n\n\nlines   ",
        "I'M HERE, you're THERE; we'll see. They'd've", "https://example.com/a?b=c&d=e#f", "৳ ১২৩৪৫ ০.৫ ৯৯%",
        "café naïve Ωmega ÅSTRÖM résumé 中文 日本語 😀👍🏽"})
    lines.push_back(code);
  return lines;
}

TEST(ExtendSplit, MarksStayInWordsAndMarkFreeTextSplitsAsTheBase) {
  for (auto [marks, plain] : {std::pair{kLlama3MarksPattern, kLlama3Pattern}, std::pair{kQwen35Pattern, kQwen2Pattern}}) {
    auto m = Splitter::make(marks, "test");
    auto p = Splitter::make(plain, "test");
    ASSERT_TRUE(m.ok() && p.ok());
    EXPECT_NE(m->kind(), Splitter::Kind::kRegex);
    EXPECT_EQ(pieces(*m, "আমি কোনো কথা বলিনি।"), (std::vector<std::string>{"আমি", " কোনো", " কথা", " বলিনি", "।"}));
    EXPECT_GT(pieces(*p, "আমি কোনো কথা বলিনি।").size(), 5u);  // the base cuts at every vowel sign
    for (const std::string& line : mark_free_lines()) ASSERT_EQ(pieces(*m, line), pieces(*p, line)) << line;
  }
}

TEST(ExtendGuard, ANewTokenMustHoldAWholeMark) {
  EXPECT_TRUE(guard_allows("\u09bf", "marks"));           // ি
  EXPECT_TRUE(guard_allows("\xa6\x95\u09c7", "marks"));   // the tail of ক, then ে
  EXPECT_FALSE(guard_allows("\u0995", "marks"));          // ক: a letter
  EXPECT_TRUE(guard_allows("\u0995", "marks+bengali"));
  EXPECT_FALSE(guard_allows("\u09e7\u09e8", "marks+bengali"));  // Bengali digits: numbers stay as the base's
  EXPECT_TRUE(guard_allows("\u09e7", "bengali"));                // unless asked (Llama 2 spells them in bytes)
  EXPECT_TRUE(guard_allows("\u09f3", "bengali"));                // ৳
  EXPECT_FALSE(guard_allows("1", "bengali"));
  EXPECT_FALSE(guard_allows("\xe0\xa6", "marks"));        // the head of a vowel sign is not one
  EXPECT_FALSE(guard_allows("\xa7\x87", "marks"));        // nor its tail
  EXPECT_FALSE(guard_allows(" the", "marks+bengali"));
}

TEST(ExtendMerges, GreedyByWeightedPairCountWithIncrementalCounts) {
  // Words over ids 0..3 (bytes "a".."d"): abc x5, ab x3, dabd x1, ccc x4.
  WordBag bag;
  bag.ids = {{0, 1, 2}, {0, 1}, {3, 0, 1, 3}, {2, 2, 2}};
  bag.counts = {5, 3, 1, 4};
  std::vector<std::string> bytes = {"a", "b", "c", "d"};
  absl::flat_hash_set<std::string> taken = {"a", "b", "c", "d"};
  MergeTrainOptions o;
  o.merges = 10;
  o.first_id = 10;
  o.allowed = [](std::string_view s) { return s != "ccc"; };
  const std::vector<NewMerge> m = learn_merges(bag, bytes, taken, o);
  // ab (5 + 3 + 1), then cc (2 per ccc: HF counts the overlapping pairs too), then ab+c (5; "bc"
  // fell from 5 to 0 when ab was merged), then cc+c (4) is refused and da, bd (1) are below
  // min_count 2.
  std::vector<std::string> made;
  std::vector<int64_t> counts;
  for (const NewMerge& x : m) made.push_back(bytes[x.id]), counts.push_back(x.count);
  EXPECT_EQ(made, (std::vector<std::string>{"ab", "cc", "abc"}));
  EXPECT_EQ(counts, (std::vector<int64_t>{9, 8, 5}));
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2].left, 10);  // ids from first_id, in rank order
  EXPECT_EQ(m[2].right, 2);
  EXPECT_EQ(bag.ids[0], (std::vector<int32_t>{12}));
  EXPECT_EQ(bag.ids[3], (std::vector<int32_t>{11, 2}));
}

// --- the real vocabularies ---

std::string corpus_manifest() {
  const std::string path = tmp_dir() + "/bn.json";
  lm::Json j = {{"sources", {{{"paths", {kShared + "/sample/bn_2000.txt"}}, {"format", "lines"}, {"lang", "bn"}}}}};
  std::ofstream(path) << j.dump();
  return path;
}

struct Extended {
  std::string base_dir, dir;
  std::string printed;  // what extend_tokenizer printed (the report)
  Tokenizer base, ext;
  lm::Json extension;
};

// `name` imported and extended once per process by `add` merges with `split` and `guard`.
const Extended* extended(const std::string& name, const std::string& split, int64_t add,
                         const std::string& guard = "marks+bengali") {
  static std::map<std::string, Extended>* cache = new std::map<std::string, Extended>;
  const std::string key = name + "_" + split + "_" + guard;
  if (auto it = cache->find(key); it != cache->end()) return &it->second;
  if (!fs::exists(vocab_dir(name) + "/tokenizer.json") || !fs::exists(kShared + "/sample/bn_2000.txt")) return nullptr;
  Extended e;
  e.base_dir = tmp_dir() + "/tok_" + name;
  e.dir = tmp_dir() + "/ext_" + key;
  auto base = import_hf_tokenizer({vocab_dir(name), e.base_dir, true});
  EXPECT_TRUE(base.ok()) << base.status();
  ExtendOptions o;
  o.base = e.base_dir, o.corpus = corpus_manifest(), o.out = e.dir, o.add = add, o.split = split, o.guard = guard;
  o.report.report_chars = 20000;
  testing::internal::CaptureStdout();
  auto r = extend_tokenizer(o);
  e.printed = testing::internal::GetCapturedStdout();
  EXPECT_TRUE(r.ok()) << r.status();
  if (!base.ok() || !r.ok()) return nullptr;
  e.base = *base;
  e.ext = r->extended;
  e.extension = lm::Json::parse(*lm::read_file(e.dir + "/" + kExtensionFile));
  return &cache->emplace(key, std::move(e)).first->second;
}

#define REQUIRE_EXTENDED(var, name, split, add, ...)                                \
  const Extended* var = extended(name, split, add, ##__VA_ARGS__);                \
  if (var == nullptr) GTEST_SKIP() << "no " << vocab_dir(name) << " or shared sample (make_hf_vocabs.py)"

void expect_base_ids_kept(const Extended& e) {
  const HfBpe& b = *e.base.hf();
  const HfBpe& x = *e.ext.hf();
  const int64_t base_vocab = e.extension["base_vocab_size"].get<int64_t>();
  EXPECT_EQ(base_vocab, e.base.vocab_size());
  EXPECT_EQ(e.extension["format"], kExtensionFormat);
  EXPECT_EQ(e.extension["base_tokenizer_hash"], e.base.hash());
  EXPECT_EQ(e.extension["vocab_size"].get<int64_t>(), e.ext.vocab_size());
  for (int32_t id = 0; id < b.vocab_size(); ++id) {
    ASSERT_EQ(x.token(id), b.token(id)) << "id " << id;
    ASSERT_EQ(x.is_special(id), b.is_special(id)) << "id " << id;
  }
  EXPECT_EQ(x.template_prefix(), b.template_prefix());
  EXPECT_EQ(e.ext.bos_id(), e.base.bos_id());
  EXPECT_EQ(e.ext.eos_id(), e.base.eos_id());
  EXPECT_EQ(e.ext.framing(), e.base.framing());
  // New ids: contiguous from the base's vocab size (past Qwen2's padding rows), in rank order.
  int64_t want = base_vocab;
  for (const auto& t : e.extension["new_tokens"]) EXPECT_EQ(t["id"].get<int64_t>(), want++);
  EXPECT_EQ(want, e.ext.vocab_size());
}

void expect_mark_free_text_as_base(const Extended& e) {
  size_t lines = 0;
  for (const std::string& line : mark_free_lines()) {
    ASSERT_EQ(e.ext.encode(line), e.base.encode(line)) << line;
    ++lines;
  }
  EXPECT_GT(lines, 1300u);
}

// Every new id is in the extended encoding of the training text or is encode(its own text).
void expect_all_reachable(const Extended& e) {
  const int32_t first = e.extension["base_vocab_size"].get<int32_t>();
  std::vector<char> seen(static_cast<size_t>(e.ext.vocab_size() - first), 0);
  for (const auto& ids : e.ext.encode_batch(read_lines(kShared + "/sample/bn_2000.txt"), 2))
    for (int32_t id : ids)
      if (id >= first) seen[id - first] = 1;
  size_t by_text = 0;
  for (const auto& t : e.extension["new_tokens"]) {
    const int32_t id = t["id"].get<int32_t>();
    if (seen[id - first]) continue;
    std::string bytes;
    for (int32_t p : t["base_pieces"].get<std::vector<int32_t>>()) bytes += e.base.hf()->token_bytes(p);
    EXPECT_EQ(e.ext.encode(bytes), std::vector<int32_t>{id}) << "new id " << id << " (" << t["token"] << ") unreached";
    ++by_text;
  }
  EXPECT_LT(by_text, seen.size());
}

void expect_base_pieces(const Extended& e) {
  for (const auto& t : e.extension["new_tokens"]) {
    std::string bytes;
    for (int32_t p : t["base_pieces"].get<std::vector<int32_t>>()) {
      ASSERT_LT(p, e.base.hf()->vocab_size());
      bytes += e.base.hf()->token_bytes(p);
    }
    ASSERT_EQ(bytes, e.ext.hf()->token_bytes(t["id"].get<int32_t>())) << t["token"];
    ASSERT_GT(t["base_pieces"].size(), 1u) << t["token"] << ": a base token already";
  }
}

void expect_bangla_shorter(const Extended& e) {
  int64_t base = 0, ext = 0;
  for (const std::string& line : read_lines(kShared + "/sample/bn_2000.txt")) {
    const auto ids = e.ext.encode(line);
    ASSERT_EQ(e.ext.decode(ids), line);
    base += static_cast<int64_t>(e.base.encode(line).size());
    ext += static_cast<int64_t>(ids.size());
  }
  EXPECT_LT(ext, base * 0.8) << "base " << base << " tokens, extended " << ext;
}

TEST(ExtendLlama3, BaseIdsKeptMarkFreeTextExactNewIdsReachable) {
  REQUIRE_EXTENDED(e, "llama3", "llama3-marks", 400);
  const int64_t added = e->ext.vocab_size() - e->base.vocab_size();
  EXPECT_GT(added, 300);
  EXPECT_LE(added, 400);
  expect_base_ids_kept(*e);
  expect_mark_free_text_as_base(*e);
  expect_all_reachable(*e);
  expect_base_pieces(*e);
  expect_bangla_shorter(*e);
  EXPECT_TRUE(fs::exists(e->dir + "/fertility.json"));
  // The report's closing line names the folder the user asked for, not the staging folder.
  EXPECT_NE(e->printed.find("report in " + e->dir + "/fertility.json"), std::string::npos) << e->printed;
  EXPECT_EQ(e->printed.find(".tmp-extend"), std::string::npos) << e->printed;
  const lm::Json rep = lm::Json::parse(*lm::read_file(e->dir + "/fertility.json"));
  std::set<std::string> encoders;
  for (const auto& r : rep["rows"]) encoders.insert(r["encoder"].get<std::string>());
  EXPECT_EQ(encoders, (std::set<std::string>{"base", "extended"}));
}

// Mark-free Bangla: the default guard lets Bengali letters make tokens, so it may change; with
// --guard marks only text holding a combining mark can meet a new merge.
const char* const kMarkFreeBangla = "এখন তখন যখন সব জল মন দল কত বন শহর";

TEST(ExtendLlama3, StrictMarksGuardKeepsMarkFreeBanglaAsTheBase) {
  REQUIRE_EXTENDED(e, "llama3", "llama3-marks", 400, "marks");
  expect_mark_free_text_as_base(*e);
  expect_all_reachable(*e);
  EXPECT_EQ(e->ext.encode(kMarkFreeBangla), e->base.encode(kMarkFreeBangla));
  for (const auto& t : e->extension["new_tokens"])
    EXPECT_TRUE(guard_allows(e->ext.hf()->token_bytes(t["id"].get<int32_t>()), "marks")) << t["token"];
  const Extended* loose = extended("llama3", "llama3-marks", 400);
  ASSERT_NE(loose, nullptr);
  EXPECT_LT(loose->ext.encode(kMarkFreeBangla).size(), loose->base.encode(kMarkFreeBangla).size());
}

TEST(ExtendQwen2, Qwen35SplitBaseIdsKeptMarkFreeTextExactNewIdsReachable) {
  REQUIRE_EXTENDED(e, "qwen2", "qwen35", 300);
  EXPECT_EQ(e->extension["base_vocab_size"].get<int64_t>(), 151936);  // after the padding rows
  expect_base_ids_kept(*e);
  expect_mark_free_text_as_base(*e);
  expect_all_reachable(*e);
  expect_base_pieces(*e);
  expect_bangla_shorter(*e);
}

// Each refusal is an error naming the cause, and writes nothing.
TEST(ExtendLlama3, RefusesBadInputWritingNothing) {
  REQUIRE_EXTENDED(e, "llama3", "llama3-marks", 400);
  auto refused = [&](ExtendOptions o, const std::string& want) {
    o.out = tmp_dir() + "/refused";
    if (o.corpus.empty()) o.corpus = corpus_manifest();
    auto r = extend_tokenizer(o);
    EXPECT_FALSE(r.ok()) << want;
    if (!r.ok()) EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status();
    EXPECT_FALSE(fs::exists(o.out)) << want;
  };
  ExtendOptions o;
  o.base = e->dir, o.add = 100;
  refused(o, "already extended");
  o.base = e->base_dir;
  o.add = 0;
  refused(o, "--add");
  o.add = kMaxAdd + 1;
  refused(o, "--add");
  o.add = 100;
  o.split = "llama3";
  refused(o, "--split");
  o.split = "llama3-marks";
  // A tokenizer.json whose vocab_size is below the tokenizer's ids (not the checkpoint's).
  const std::string small = tmp_dir() + "/small_vocab";
  fs::create_directories(small);
  fs::copy_file(e->base_dir + "/" + kHfJsonFile, small + "/" + kHfJsonFile, fs::copy_options::overwrite_existing);
  lm::Json meta = lm::Json::parse(*lm::read_file(e->base_dir + "/" + kMetaFile));
  meta["vocab_size"] = 128000;
  std::ofstream(small + "/" + kMetaFile) << meta.dump();
  o.base = small;
  refused(o, "vocab_size");
  // A report that cannot be written (a --parallel file that is not there) after training.
  o.base = e->base_dir;
  o.report.parallel = tmp_dir() + "/no-such-parallel.jsonl";
  refused(o, "no-such-parallel");
  EXPECT_FALSE(fs::exists(tmp_dir() + "/refused.tmp-extend"));
  o.report.parallel.clear();
  o.guard = "letters";
  refused(o, "--guard");
}

// --- Llama 2: a SentencePiece BPE tokenizer.model grown by new pieces (tokenizer/extend_spm.cpp) ---

ModelParts model_parts(const std::string& dir) {
  ModelParts m;
  EXPECT_TRUE(parse_model_parts(*lm::read_file(dir + "/" + kForeignSpmFile), &m)) << dir;
  return m;
}

// Base pieces kept bit for bit (text, score, type) and every new piece scored below every base
// merge rank, in rank order: SentencePiece, llama.cpp and transformers apply the base's merges
// first, so no base id moves and mark-free text cannot change.
void expect_spm_base_kept(const Extended& e) {
  const ModelParts b = model_parts(e.base_dir), x = model_parts(e.dir);
  const int64_t base_vocab = e.extension["base_vocab_size"].get<int64_t>();
  ASSERT_EQ(static_cast<int64_t>(b.pieces.size()), base_vocab);
  ASSERT_EQ(static_cast<int64_t>(x.pieces.size()), e.ext.vocab_size());
  float lowest = 0;
  for (size_t id = 0; id < b.pieces.size(); ++id) {
    ASSERT_EQ(x.pieces[id].piece, b.pieces[id].piece) << id;
    ASSERT_EQ(x.pieces[id].score, b.pieces[id].score) << id;
    ASSERT_EQ(x.pieces[id].type, b.pieces[id].type) << id;
    if (b.pieces[id].type == kNormalPiece && b.pieces[id].score > -1e8f) lowest = std::min(lowest, b.pieces[id].score);
  }
  for (size_t id = b.pieces.size(); id < x.pieces.size(); ++id) {
    ASSERT_EQ(x.pieces[id].type, kNormalPiece) << id;
    ASSERT_LT(x.pieces[id].score, id == b.pieces.size() ? lowest : x.pieces[id - 1].score) << id;
  }
  EXPECT_EQ(e.extension["format"], kExtensionFormat);
  EXPECT_EQ(e.extension["base_tokenizer_hash"], e.base.hash());
  EXPECT_EQ(e.extension["split"], "sentencepiece-words");
  EXPECT_EQ(e.ext.bos_id(), e.base.bos_id());
  EXPECT_EQ(e.ext.eos_id(), e.base.eos_id());
  EXPECT_EQ(e.ext.unk_id(), e.base.unk_id());
  EXPECT_EQ(e.ext.framing(), e.base.framing());
  int64_t want = base_vocab;
  for (const auto& t : e.extension["new_tokens"]) EXPECT_EQ(t["id"].get<int64_t>(), want++);
  EXPECT_EQ(want, e.ext.vocab_size());
}

// A base piece's bytes ("<0xE0>" is one byte).
std::string spm_piece_bytes(const Tokenizer& t, int32_t id) {
  if (!t.is_byte(id)) return t.piece(id);
  return std::string(1, static_cast<char>(std::stoi(t.piece(id).substr(3, 2), nullptr, 16)));
}

// Each new piece is its base pieces joined, and is reached: in the extended encoding of the
// training text, or as the one id of its own text encoded alone (a word as SentencePiece cuts it).
void expect_spm_pieces_reachable(const Extended& e) {
  const int32_t first = e.extension["base_vocab_size"].get<int32_t>();
  std::vector<char> seen(static_cast<size_t>(e.ext.vocab_size() - first), 0);
  for (const auto& ids : e.ext.encode_batch(read_lines(kShared + "/sample/bn_2000.txt"), 2))
    for (int32_t id : ids)
      if (id >= first) seen[id - first] = 1;
  const auto words = SpmWords::make(*lm::read_file(e.dir + "/" + kForeignSpmFile));
  ASSERT_NE(words, nullptr);
  size_t by_text = 0;
  for (const auto& t : e.extension["new_tokens"]) {
    const int32_t id = t["id"].get<int32_t>();
    const std::string piece = t["token"].get<std::string>();
    std::string joined;
    for (int32_t p : t["base_pieces"].get<std::vector<int32_t>>()) joined += spm_piece_bytes(e.base, p);
    ASSERT_EQ(joined, piece) << "new id " << id;
    ASSERT_EQ(e.ext.piece(id), piece);
    if (seen[id - first]) continue;
    std::vector<int32_t> alone;
    words->encode_word(piece, &alone);
    EXPECT_EQ(alone, std::vector<int32_t>{id}) << "new id " << id << " (" << piece << ") unreached";
    ++by_text;
  }
  EXPECT_LT(by_text, seen.size() / 2);
}

// The fast word path (SpmWords) and the SentencePiece library itself give the same ids on the
// extended model.
void expect_spm_library_agrees(const Extended& e, const std::vector<std::string>& texts) {
  ::setenv("LM_SPM_PLAIN", "1", 1);
  auto plain = Tokenizer::load(e.dir);
  ::unsetenv("LM_SPM_PLAIN");
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_FALSE(plain->spm_words());
  ASSERT_TRUE(e.ext.spm_words());
  size_t differ = 0;
  for (const std::string& t : texts)
    if (plain->encode(t) != e.ext.encode(t) && differ++ == 0) ADD_FAILURE() << "first difference: " << t;
  EXPECT_EQ(differ, 0u) << "of " << texts.size();
}

TEST(ExtendLlama2, BasePiecesKeptMarkFreeTextExactNewPiecesReachable) {
  REQUIRE_EXTENDED(e, "llama2", "llama3-marks", 600);
  const int64_t added = e->ext.vocab_size() - e->base.vocab_size();
  EXPECT_EQ(added, 600);
  expect_spm_base_kept(*e);
  expect_mark_free_text_as_base(*e);
  expect_spm_pieces_reachable(*e);
  std::vector<std::string> texts = read_lines(kShared + "/sample/bn_2000.txt");
  for (const std::string& s : mark_free_lines()) texts.push_back(s);
  expect_spm_library_agrees(*e, texts);
  int64_t base = 0, ext = 0;
  for (const std::string& line : read_lines(kShared + "/sample/bn_2000.txt")) {
    const auto ids = e->ext.encode(line);
    ASSERT_EQ(e->ext.decode(ids), line);
    base += static_cast<int64_t>(e->base.encode(line).size());
    ext += static_cast<int64_t>(ids.size());
  }
  EXPECT_LT(ext, base * 0.4) << "base " << base << " tokens, extended " << ext;  // Llama 2: 3 bytes a letter
}

// --guard bengali gives Bengali digits pieces (marks+bengali keeps them as the base has them).
TEST(ExtendLlama2, BengaliGuardGivesDigitsTheirPieces) {
  REQUIRE_EXTENDED(e, "llama2", "llama3-marks", 600);
  REQUIRE_EXTENDED(b, "llama2", "llama3-marks", 600, "bengali");
  const std::string digits = "\u09e7\u09ef\u09ed\u09e7";  // ১৯৭১
  EXPECT_EQ(e->ext.encode(digits), e->base.encode(digits));
  EXPECT_LT(b->ext.encode(digits).size(), b->base.encode(digits).size());
  expect_spm_base_kept(*b);
  for (const std::string& line : mark_free_lines())  // text without a Bengali-block character: exact
    if (line.find("\xe0\xa6") == std::string::npos && line.find("\xe0\xa7") == std::string::npos)
      ASSERT_EQ(b->ext.encode(line), b->base.encode(line)) << line;
  // --guard auto (the default) is bengali for a SentencePiece base.
  REQUIRE_EXTENDED(a, "llama2", "llama3-marks", 600, "auto");
  EXPECT_EQ(a->extension["guard"], "bengali");
  EXPECT_EQ(a->ext.hash(), b->ext.hash());
}

// A SentencePiece model the word path cannot encode exactly (here: Llama 2's marked unigram) is
// refused, naming the folder, and nothing is written.
TEST(ExtendLlama2, RefusesASentencePieceModelThatIsNotBpe) {
  if (!fs::exists(vocab_dir("llama2") + "/tokenizer.model")) GTEST_SKIP() << "no llama2 vocabulary";
  const std::string dir = tmp_dir() + "/unigram_base";
  fs::create_directories(dir);
  const std::string bytes = *lm::read_file(vocab_dir("llama2") + "/tokenizer.model");
  std::string unigram;
  wire::filter_message(bytes, {}, [](int field, std::string* p) {
    if (field != 2) return false;  // trainer_spec: model_type (3) = UNIGRAM (1)
    std::string spec;
    wire::filter_message(*p, {3}, [](int, std::string*) { return false; }, &spec);
    wire::write_varint(3 << 3, &spec);
    wire::write_varint(1, &spec);
    *p = spec;
    return true;
  }, &unigram);
  std::ofstream(dir + "/tokenizer.model", std::ios::binary) << unigram;
  fs::copy_file(vocab_dir("llama2") + "/tokenizer_config.json", dir + "/tokenizer_config.json");
  ExtendOptions o;
  o.base = dir, o.corpus = corpus_manifest(), o.out = tmp_dir() + "/unigram_ext", o.add = 100;
  auto r = extend_tokenizer(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a BPE tokenizer.model"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find(dir), std::string::npos) << r.status();
  EXPECT_FALSE(fs::exists(o.out));
}

// An HF checkpoint folder as the base is imported first: the same extension as from its import.
TEST(ExtendLlama3, HfFolderAsBaseIsImportedFirst) {
  REQUIRE_EXTENDED(e, "llama3", "llama3-marks", 400);
  ExtendOptions o;
  o.base = vocab_dir("llama3"), o.corpus = corpus_manifest(), o.out = tmp_dir() + "/ext_from_hf", o.add = 400;
  o.report.report_chars = 2000;
  auto r = extend_tokenizer(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->extended.hash(), e->ext.hash());
  EXPECT_FALSE(fs::exists(o.out + ".base-import"));
}

// HF tokenizers on the written hf-tokenizer.json gives lmforge's ids on every line.
void expect_hf_agrees(const std::string& dir, const Tokenizer& tok, const std::vector<std::string>& texts) {
  const std::string stem = tmp_dir() + "/hf_" + fs::path(dir).filename().string();
  const std::string in = stem + ".texts.jsonl", out = stem + ".hf.ids";
  {
    std::ofstream f(in);
    for (const std::string& t : texts) f << lm::Json(t).dump() << "\n";
  }
  const std::string cmd = std::string(LM_TEST_PYTHON) + " " + LM_SOURCE_DIR + "/tests/tokenizer/hf_encode.py " + dir +
                          "/" + kHfJsonFile + " " + in + " " + out;
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "no tokenizers package";
  ASSERT_EQ(rc, 0) << cmd;
  std::ifstream f(out);
  size_t i = 0, differ = 0;
  for (std::string line; std::getline(f, line); ++i) {
    std::istringstream s(line);
    std::vector<int32_t> hf;
    for (int32_t id; s >> id;) hf.push_back(id);
    if (hf != tok.encode(texts[i]) && differ++ == 0) ADD_FAILURE() << "first difference: " << texts[i];
  }
  EXPECT_EQ(i, texts.size());
  EXPECT_EQ(differ, 0u) << "of " << i << " lines";
  std::printf("HF tokenizers and lmforge: %zu lines compared, %zu differ (%s)\n", i, differ, dir.c_str());
}

void expect_hf_agrees(const Extended& e) {
  std::vector<std::string> texts = read_lines(kShared + "/sample/bn_2000.txt");
  for (const std::string& s : mark_free_lines()) texts.push_back(s);
  expect_hf_agrees(e.dir, e.ext, texts);
}

// LM_EXTENDED_DIRS=dir1:dir2 (e.g. bench/extend_bangla.sh's 32k folders): the same comparison on
// the samples and both sides of all parallel sentences.
TEST(HfTokenizer, ExtendedFoldersGivenMatchHf) {
  const char* dirs = std::getenv("LM_EXTENDED_DIRS");
  if (dirs == nullptr || !*dirs) GTEST_SKIP() << "set LM_EXTENDED_DIRS=dir1:dir2 to compare extended folders";
  std::vector<std::string> texts = read_lines(kShared + "/sample/bn_2000.txt");
  for (const std::string& s : mark_free_lines()) texts.push_back(s);
  auto pairs = read_parallel(kShared + "/parallel/bn_en_parallel.jsonl.gz", {});
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  for (const auto& [bn, en] : *pairs) texts.push_back(bn), texts.push_back(en);
  std::istringstream list(dirs);
  for (std::string dir; std::getline(list, dir, ':');) {
    auto tok = Tokenizer::load(dir);
    ASSERT_TRUE(tok.ok()) << tok.status();
    expect_hf_agrees(dir, *tok, texts);
  }
}

TEST(HfTokenizer, ExtendedLlama3MatchesHf) {
  REQUIRE_EXTENDED(e, "llama3", "llama3-marks", 400);
  expect_hf_agrees(*e);
}

// gpt-4o (llama.cpp's pattern, GGUF-exportable): English is not exact under it (CamelCase,
// contractions), so only the ids, reachability and HF's agreement are checked.
TEST(HfTokenizer, ExtendedLlama3Gpt4oMatchesHf) {
  REQUIRE_EXTENDED(e, "llama3", "gpt-4o", 300);
  EXPECT_EQ(e->extension["split"], "gpt-4o");
  EXPECT_EQ(e->ext.hf()->splitter().kind(), Splitter::Kind::kGpt4o);
  expect_base_ids_kept(*e);
  expect_all_reachable(*e);
  expect_bangla_shorter(*e);
  expect_hf_agrees(*e);
}

TEST(HfTokenizer, ExtendedQwen2MatchesHf) {
  REQUIRE_EXTENDED(e, "qwen2", "qwen35", 300);
  expect_hf_agrees(*e);
}

}  // namespace
