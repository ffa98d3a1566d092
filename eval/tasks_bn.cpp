#include "eval/tasks_bn.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/log.h"
#include "corpus/corpus.h"
#include "corpus/parquet_rows.h"
#include "corpus/text_file.h"
#include "eval/py_random.h"

namespace lm::eval {
namespace fs = std::filesystem;

namespace {

// What lmforge needs of one lm-eval task YAML (lm_eval/tasks/...; docs/benchmarks.md).
struct BanglaSpec {
  std::string name;
  std::string test_split;     // the YAML's test_split (else validation_split): the scored items
  std::string fewshot_split;  // fewshot_split (else training_split); "" = none
  bool first_n = true;        // fewshot_config.sampler first_n; false: the harness's random sampler
  std::string description;    // the YAML's description: the system message, before everything
  bool acc_only = false;      // metric_list is acc alone
};

const std::vector<BanglaSpec>& specs() {
  static const std::vector<BanglaSpec> s = {
      {"bangla_mmlu", "test", "dev", true,
       "The following are multiple choice questions (with answers) about range of topics in Bangla", false},
      {"piqa_bn", "validation", "train", true, "Bangla PIQA: physical commonsense reasoning questions.", true},
      {"boolqa_bn", "validation", "train", true, "Bangla BoolQ: yes/no questions based on a passage.", true},
      {"openbookqa_bn", "test", "train", true, "Bangla OpenBookQA multiple-choice questions.", false},
      {"bangla_commonsenseqa", "validation", "train", true,
       "The following are Bangla multiple-choice CommonsenseQA-style questions.", false},
      {"belebele_ben_Beng", "test", "test", true, "", false},
      {"global_mmlu_bn", "test", "dev", false, "", true},
      {"arc_bn", "test", "train", false, "", false},
      {"hellaswag_bn", "val", "val", false, "", false},  // no few-shot split: the harness draws from val
      {"m_mmlu_bn", "test", "train", true, "", true},
  };
  return s;
}

const BanglaSpec* find_spec(const std::string& name) {
  for (const auto& s : specs())
    if (s.name == name) return &s;
  return nullptr;
}

// Length of the UTF-8 sequence starting with byte `c` (1 for a stray continuation byte).
size_t utf8_len(unsigned char c) { return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

uint32_t decode_at(const std::string& s, size_t i, size_t n) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
  if (n == 1) return b(0);
  if (n == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (n == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

// Python's str.isspace() for one code point.
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

// okapi's utils.preprocess (= HellaSwag's): strip, " [title]" -> ". ", drop "[...]", "  " -> " ".
std::string okapi_preprocess(const std::string& text) {
  std::string s = replace_all(py_strip(text), " [title]", ". ");
  static const std::regex brackets("\\[.*?\\]");
  s = std::regex_replace(s, brackets, "");
  return replace_all(s, "  ", " ");
}

// A field as Jinja's {{ }} prints it: a string as is, a number as Python's str(), null as None.
std::string text_of(const Json& doc, const char* key) {
  const Json& v = doc.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  return v.dump();
}

// doc_to_target resolved to an index as process_results does: an int (a bool is one) is the index;
// a string is looked up in the choices. `from_template`: the YAML target is a Jinja template whose
// digit result the harness literal_eval()s to an int.
absl::StatusOr<int> target_index(const Json& v, const std::vector<std::string>& choices, const std::string& where,
                                 const std::string& field, bool from_template = false) {
  int64_t idx = -1;
  if (v.is_boolean()) idx = v.get<bool>() ? 1 : 0;
  else if (v.is_number_integer()) idx = v.get<int64_t>();
  else if (v.is_string()) {
    const std::string s = v.get<std::string>();
    auto it = std::find(choices.begin(), choices.end(), s);
    if (from_template && !s.empty() && std::all_of(s.begin(), s.end(), ::isdigit)) absl::SimpleAtoi(s, &idx);
    else if (it != choices.end()) idx = it - choices.begin();
  }
  if (idx < 0 || idx >= static_cast<int64_t>(choices.size()))
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", field, " ", v.dump(), " is not one of the ",
                                                   choices.size(), " choices [", absl::StrJoin(choices, ","),
                                                   "] (the harness would score it wrong on every prediction)"));
  return static_cast<int>(idx);
}

const std::vector<std::string> kLetters = {"A", "B", "C", "D", "E"};
std::vector<std::string> letters(size_t n) { return {kLetters.begin(), kLetters.begin() + n}; }

// "<stem>\nA. t\nB. t\n...Answer:" (openbookqa_bn, bangla_commonsenseqa: the Jinja loop).
absl::StatusOr<BanglaDoc> labelled_choices_doc(const Json& d, const std::string& where, size_t n) {
  BanglaDoc b;
  b.query = py_strip(text_of(d, "question_stem")) + "\n";
  const Json& labels = d.at("choices").at("label");
  const Json& texts = d.at("choices").at("text");
  for (size_t i = 0; i < labels.size(); ++i)
    b.query += absl::StrCat(labels[i].is_string() ? labels[i].get<std::string>() : labels[i].dump(), ". ",
                            texts.at(i).is_string() ? texts[i].get<std::string>() : texts[i].dump(), "\n");
  b.query += "Answer:";
  b.choices = letters(n);
  LM_ASSIGN_OR_RETURN(b.gold, target_index(d.at("answerKey"), b.choices, where, "answerKey"));
  return b;
}

// "<q>\nA. a\nB. b\nC. c\nD. d\nAnswer:" over option_a..option_d (global_mmlu_bn, m_mmlu_bn).
absl::StatusOr<BanglaDoc> lettered_options_doc(const Json& d, const std::string& where, const char* question) {
  BanglaDoc b;
  b.query = absl::StrCat(py_strip(text_of(d, question)), "\nA. ", text_of(d, "option_a"), "\nB. ",
                         text_of(d, "option_b"), "\nC. ", text_of(d, "option_c"), "\nD. ", text_of(d, "option_d"),
                         "\nAnswer:");
  b.choices = letters(4);
  LM_ASSIGN_OR_RETURN(b.gold, target_index(d.at("answer"), b.choices, where, "answer"));
  return b;
}

absl::StatusOr<BanglaDoc> titulm_doc(const std::string& task, const Json& d, const std::string& where) {
  BanglaDoc b;
  if (task == "bangla_mmlu") {
    const Json& o = d.at("options");
    b.query = absl::StrCat(py_strip(text_of(d, "question")), " A. ", o.at(0).get<std::string>(), " B. ",
                           o.at(1).get<std::string>(), " C. ", o.at(2).get<std::string>(), " D. ",
                           o.at(3).get<std::string>(), " Answer:");
    b.choices = letters(4);
    LM_ASSIGN_OR_RETURN(b.gold, target_index(d.at("answer"), b.choices, where, "answer"));
  } else if (task == "piqa_bn") {
    b.query = absl::StrCat(py_strip(text_of(d, "goal")), "\nA. ", py_strip(text_of(d, "sol1")), "\nB. ",
                           py_strip(text_of(d, "sol2")), "\nAnswer:");
    b.choices = letters(2);
    LM_ASSIGN_OR_RETURN(b.gold, target_index(d.at("label"), b.choices, where, "label"));
  } else if (task == "boolqa_bn") {
    b.query = absl::StrCat("Passage:\n", py_strip(text_of(d, "passage")), "\n\nQuestion:\n",
                           py_strip(text_of(d, "question")), "\n\nAnswer:");
    b.choices = {"yes", "no"};
    LM_ASSIGN_OR_RETURN(b.gold, target_index(d.at("answer"), b.choices, where, "answer"));
  } else {
    return labelled_choices_doc(d, where, task == "openbookqa_bn" ? 4 : 5);
  }
  return b;
}

absl::StatusOr<BanglaDoc> okapi_doc(const std::string& task, const Json& d, const std::string& where) {
  BanglaDoc b;
  if (task == "m_mmlu_bn") return lettered_options_doc(d, where, "instruction");
  if (task == "arc_bn") {  // okapi arc utils.process_docs
    b.query = "Question: " + okapi_preprocess(text_of(d, "instruction")) + "\nAnswer:";
    for (const char* k : {"option_a", "option_b", "option_c", "option_d", "option_e"})
      if (d.contains(k) && d[k].is_string() && !d[k].get<std::string>().empty())
        b.choices.push_back(okapi_preprocess(d[k].get<std::string>()));
    LM_ASSIGN_OR_RETURN(b.gold, target_index(d.at("answer"), letters(5), where, "answer"));
    if (b.gold >= static_cast<int>(b.choices.size()))
      return absl::InvalidArgumentError(absl::StrCat(where, ": answer ", d["answer"].dump(), " names an empty option"));
    return b;
  }
  // hellaswag_bn: okapi hellaswag utils.process_docs, target "{{label.lstrip()}}".
  b.query = okapi_preprocess(text_of(d, "activity_label") + ": " + text_of(d, "ctx_a") + " " +
                             data::python_capitalize(text_of(d, "ctx_b")));
  for (const auto& e : d.at("endings")) b.choices.push_back(okapi_preprocess(e.get<std::string>()));
  Json label = d.at("label");
  if (label.is_string()) {
    std::string s = label.get<std::string>();
    s.erase(0, s.find_first_not_of(" \t\n\r\f\v"));
    label = s;
  }
  LM_ASSIGN_OR_RETURN(b.gold, target_index(label, b.choices, where, "label", /*from_template=*/true));
  return b;
}

absl::StatusOr<std::vector<Json>> read_jsonl(const std::string& path) {
  LM_ASSIGN_OR_RETURN(std::string text, data::read_text_file(path));
  std::vector<Json> docs;
  int64_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (py_strip(std::string(line)).empty()) continue;
    LM_ASSIGN_OR_RETURN(Json j, parse_json(std::string(line), path, line_no));
    if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": expected a JSON object"));
    docs.push_back(std::move(j));
  }
  return docs;
}

absl::Status not_found(const std::string& task, const std::string& dir, const std::string& split,
                       const std::string& why) {
  return absl::NotFoundError(absl::StrCat(task, ": not found, expected ", dir, "/", split, ".jsonl or ", split,
                                          ".parquet or ", split, "-00000-of-NNNNN.parquet or ", split,
                                          "/0000.parquet (", why,
                                          "; the rows of the HF dataset as downloaded: layout and sources in "
                                          "docs/benchmarks.md)"));
}

// The Hugging Face hub's shards of `split` in `dir`, in shard order: <split>-NNNNN-of-MMMMM.parquet,
// also with the hash suffix of older uploads (<split>-00000-of-00001-5a8f4c6e2bd3b6d0.parquet).
// Every one of the M must be there, once.
absl::StatusOr<std::vector<std::string>> split_shards(const std::string& dir, const std::string& split) {
  const std::regex shard_name(split + "-([0-9]{1,9})-of-([0-9]{1,9})(-[0-9a-f]+)?\\.parquet");
  std::map<int64_t, std::string> shards;
  std::set<int64_t> totals;
  int64_t files = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, shard_name)) continue;
    shards[std::stoll(m[1].str())] = e.path().string();
    totals.insert(std::stoll(m[2].str()));
    ++files;
  }
  if (shards.empty()) return std::vector<std::string>{};
  const int64_t total = *totals.rbegin();
  int64_t missing = 0;
  while (shards.count(missing)) ++missing;
  if (totals.size() > 1 || files != total || missing != total)
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": the Parquet shards of split '", split, "' do not make one set: ", files, " files named ",
        split, "-*-of-", absl::StrJoin(totals, "/"), missing < total ? absl::StrCat(", shard ", missing, " missing") : "",
        " (keep every shard of one download and nothing else)"));
  std::vector<std::string> out;
  for (auto& [index, path] : shards) out.push_back(path);
  return out;
}

// The hub's automatic conversion (its refs/convert/parquet branch): <split>/0000.parquet,
// <split>/0001.parquet, ... in `dir`, in number order; numbered from 0 without a gap.
absl::StatusOr<std::vector<std::string>> converted_parts(const std::string& dir, const std::string& split) {
  static const std::regex part_name("([0-9]{1,9})\\.parquet");
  std::map<int64_t, std::string> parts;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir + "/" + split, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, part_name)) parts[std::stoll(m[1].str())] = e.path().string();
  }
  std::vector<std::string> out;
  for (auto& [index, path] : parts) {
    if (index != static_cast<int64_t>(out.size()))
      return absl::InvalidArgumentError(absl::StrCat(dir, "/", split, ": the Parquet parts are numbered with a gap: ",
                                                     out.size(), " parts, then ", fs::path(path).filename().string(),
                                                     " (keep every part of one download)"));
    out.push_back(path);
  }
  return out;
}

// The files of one split, read in order: <split>.jsonl, else <split>.parquet, else the hub's
// shards, else its converted parts (docs/benchmarks.md). With more than one of these present the
// first is read and the log says so. Empty when there is none.
absl::StatusOr<std::vector<std::string>> split_files(const std::string& task, const std::string& dir,
                                                     const std::string& split) {
  std::vector<std::vector<std::string>> forms;
  for (const char* ext : {".jsonl", ".parquet"})
    if (fs::is_regular_file(dir + "/" + split + ext)) forms.push_back({dir + "/" + split + ext});
  LM_ASSIGN_OR_RETURN(std::vector<std::string> shards, split_shards(dir, split));
  LM_ASSIGN_OR_RETURN(std::vector<std::string> parts, converted_parts(dir, split));
  for (auto* form : {&shards, &parts})
    if (!form->empty()) forms.push_back(*form);
  if (forms.empty()) return std::vector<std::string>{};
  const auto name = [&](const std::string& path) { return fs::relative(path, dir).string(); };
  if (forms.size() > 1) {
    std::vector<std::string> others;
    for (size_t i = 1; i < forms.size(); ++i) others.push_back(name(forms[i][0]));
    log_info("%s: split %s: reading %s (order: .jsonl, .parquet, shards, converted parts), not %s", task, split,
             name(forms[0][0]), absl::StrJoin(others, ", "));
  }
  return forms[0];
}

absl::StatusOr<std::vector<Json>> read_split_file(const std::string& path) {
  if (absl::EndsWith(path, ".parquet")) return data::read_parquet_rows(path);
  return read_jsonl(path);
}

// Documents of a split with their rendering; errors name the file and the document (its row).
absl::Status render_split(const std::string& task, const std::vector<std::string>& files, std::vector<Json>& raw,
                          std::vector<BanglaDoc>& docs) {
  for (const std::string& path : files) {
    LM_ASSIGN_OR_RETURN(std::vector<Json> rows, read_split_file(path));
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string where = absl::StrCat(path, ": document ", i + 1);
      try {
        LM_ASSIGN_OR_RETURN(BanglaDoc d, bangla_doc(task, rows[i], where));
        docs.push_back(std::move(d));
      } catch (const Json::exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", e.what(),
                                                       " (not the schema lm-eval's YAML reads: docs/benchmarks.md)"));
      }
      raw.push_back(std::move(rows[i]));
    }
  }
  return absl::OkStatus();
}

std::string shot_text(const BanglaDoc& d) { return d.query + " " + d.choices[d.gold] + "\n\n"; }

// The few-shot block of a test document with the first_n sampler: the first k of the few-shot
// split, the document itself left out when that split is the test split (rm_eval_doc: row equality).
std::string first_n_block(const std::vector<Json>& pool_raw, const std::vector<BanglaDoc>& pool, const Json* self,
                          int64_t k) {
  std::string out;
  int64_t used = 0;
  for (size_t j = 0; j < pool.size() && used < k; ++j) {
    if (self && pool_raw[j] == *self) continue;
    out += shot_text(pool[j]);
    ++used;
  }
  return out;
}

// The harness's default sampler: Random(1234).sample(pool, k) per document in document order (one
// generator per task: per category subtask for global_mmlu_bn, whose pool is its category's); from
// the test split itself it samples k + 1 and drops the document (ContextSampler.sample).
class RandomShots {
 public:
  RandomShots(const std::vector<Json>& pool_raw, const std::vector<BanglaDoc>& pool, bool by_category)
      : pool_raw_(pool_raw), pool_(pool), by_category_(by_category) {}

  std::string block(const Json& doc, const Json* self, int64_t k) {
    const std::string cat = by_category_ ? doc.value("subject_category", std::string()) : "";
    auto [it, fresh] = rngs_.try_emplace(cat, PyRandom(1234));
    std::vector<size_t> members;
    for (size_t j = 0; j < pool_.size(); ++j)
      if (!by_category_ || pool_raw_[j].value("subject_category", std::string()) == cat) members.push_back(j);
    const uint64_t want = std::min<uint64_t>(k + (self ? 1 : 0), members.size());
    std::string out;
    int64_t used = 0;
    for (uint64_t idx : it->second.sample(members.size(), want)) {
      if (used == k || (self && pool_raw_[members[idx]] == *self)) continue;
      out += shot_text(pool_[members[idx]]);
      ++used;
    }
    return out;
  }

 private:
  const std::vector<Json>& pool_raw_;
  const std::vector<BanglaDoc>& pool_;
  bool by_category_;
  std::map<std::string, PyRandom> rngs_;
};

McExample to_example(const std::string& context, const BanglaDoc& d, const Json& raw, size_t index) {
  McExample ex;
  for (const auto& c : d.choices) {
    ex.contexts.push_back(context);
    ex.continuations.push_back(" " + c);
    ex.norm_text.push_back(c);
  }
  ex.gold = d.gold;
  ex.id = raw.contains("id") ? (raw["id"].is_string() ? raw["id"].get<std::string>() : raw["id"].dump())
                             : std::to_string(index);
  return ex;
}

}  // namespace

std::string py_strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e) {
    const size_t n = std::min(utf8_len(static_cast<unsigned char>(s[b])), e - b);
    if (!py_space(decode_at(s, b, n))) break;
    b += n;
  }
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (!py_space(decode_at(s, start, e - start))) break;
    e = start;
  }
  return s.substr(b, e - b);
}

std::vector<std::string> bangla_task_names() {
  std::vector<std::string> out;
  for (const auto& s : specs()) out.push_back(s.name);
  return out;
}

bool is_bangla_task(const std::string& name) { return find_spec(name) != nullptr; }

namespace {

// global_mmlu_bn is the harness's group of six subtasks, one per subject_category (utils.py's
// CATEGORIES, each a filter on the test split): an item of any other category is in no subtask,
// so the harness never scores it. Dropped here too, and counted.
void drop_outside_categories(const std::string& source, std::vector<Json>& raw, std::vector<BanglaDoc>& docs) {
  static const std::set<std::string> kCategories = {"Business", "Humanities", "Medical",
                                                    "Other",    "STEM",       "Social Sciences"};
  std::vector<Json> kept_raw;
  std::vector<BanglaDoc> kept;
  for (size_t i = 0; i < raw.size(); ++i) {
    const Json& c = raw[i].contains("subject_category") ? raw[i]["subject_category"] : Json();
    if (c.is_string() && kCategories.count(c.get<std::string>())) {
      kept_raw.push_back(std::move(raw[i]));
      kept.push_back(std::move(docs[i]));
    }
  }
  if (kept.size() < raw.size())
    log_warn("global_mmlu_bn: %d of %d items of %s have a subject_category outside the harness's six subtasks "
             "(Business, Humanities, Medical, Other, STEM, Social Sciences): skipped, as the harness scores none of them",
             raw.size() - kept.size(), raw.size(), source);
  raw = std::move(kept_raw);
  docs = std::move(kept);
}

// The items --limit keeps, in file order: the first `limit`, or (global_mmlu_bn, the harness's six
// category subtasks, each limited on its own) the first `limit` of each category.
std::vector<size_t> limited_items(const std::string& task, const std::vector<Json>& raw, int64_t limit) {
  std::vector<size_t> keep;
  std::map<std::string, int64_t> seen;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (limit <= 0) {
      keep.push_back(i);
    } else if (task == "global_mmlu_bn") {
      if (seen[raw[i].value("subject_category", std::string())]++ < limit) keep.push_back(i);
    } else if (static_cast<int64_t>(keep.size()) < limit) {
      keep.push_back(i);
    }
  }
  return keep;
}

}  // namespace

absl::StatusOr<BanglaDoc> bangla_doc(const std::string& task, const Json& d, const std::string& where) {
  if (task == "belebele_ben_Beng") {
    BanglaDoc b;
    b.query = absl::StrCat("P: ", text_of(d, "flores_passage"), "\nQ: ", py_strip(text_of(d, "question")),
                           "\nA: ", text_of(d, "mc_answer1"), "\nB: ", text_of(d, "mc_answer2"), "\nC: ",
                           text_of(d, "mc_answer3"), "\nD: ", text_of(d, "mc_answer4"), "\nAnswer:");
    b.choices = letters(4);
    // "{{['1', '2', '3', '4'].index(correct_answer_num)}}"
    const std::string n = text_of(d, "correct_answer_num");
    const std::vector<std::string> nums = {"1", "2", "3", "4"};
    LM_ASSIGN_OR_RETURN(b.gold, target_index(Json(n), nums, where, "correct_answer_num"));
    return b;
  }
  if (task == "global_mmlu_bn") return lettered_options_doc(d, where, "question");
  if (task == "arc_bn" || task == "hellaswag_bn" || task == "m_mmlu_bn") return okapi_doc(task, d, where);
  if (!is_bangla_task(task)) return absl::InvalidArgumentError("not a Bangla task: " + task);
  return titulm_doc(task, d, where);
}

absl::StatusOr<McTask> load_bangla_task(const std::string& name, const std::string& data_dir, int64_t limit,
                                        int64_t num_fewshot) {
  const BanglaSpec* spec = find_spec(name);
  if (!spec) return absl::InvalidArgumentError("not a Bangla task: " + name);
  const std::string dir = data_dir + "/" + name;
  McTask t;
  t.name = name;
  t.acc_only = spec->acc_only;
  LM_ASSIGN_OR_RETURN(const std::vector<std::string> test_files, split_files(name, dir, spec->test_split));
  if (test_files.empty()) return not_found(name, dir, spec->test_split, "the harness's " + spec->test_split + " split");
  t.source = absl::StrJoin(test_files, ",");
  const int64_t k = std::max<int64_t>(num_fewshot, 0);
  std::vector<Json> raw, pool_raw;
  std::vector<BanglaDoc> docs, pool;
  LM_RETURN_IF_ERROR(render_split(name, test_files, raw, docs));
  if (name == "global_mmlu_bn") drop_outside_categories(t.source, raw, docs);
  if (k > 0) {
    LM_ASSIGN_OR_RETURN(const std::vector<std::string> fs_files, split_files(name, dir, spec->fewshot_split));
    if (fs_files.empty()) return not_found(name, dir, spec->fewshot_split, "the few-shot split for --num-fewshot");
    LM_RETURN_IF_ERROR(render_split(name, fs_files, pool_raw, pool));
    if (static_cast<int64_t>(pool.size()) < k + (spec->fewshot_split == spec->test_split))
      return absl::InvalidArgumentError(absl::StrCat(absl::StrJoin(fs_files, ","), ": ", pool.size(),
                                                     " documents, fewer than --num-fewshot ", k));
  }
  const bool same_split = spec->fewshot_split == spec->test_split;
  RandomShots random_shots(pool_raw, pool, name == "global_mmlu_bn");
  for (size_t i : limited_items(name, raw, limit)) {
    const Json* self = same_split ? &raw[i] : nullptr;
    const std::string shots = k == 0         ? ""
                              : spec->first_n ? first_n_block(pool_raw, pool, self, k)
                                              : random_shots.block(raw[i], self, k);
    t.examples.push_back(to_example(spec->description + shots + docs[i].query, docs[i], raw[i], i));
  }
  t.split = absl::StrCat(spec->test_split, k == 0 ? std::string(", 0-shot")
                                         : spec->first_n
                                             ? absl::StrCat(", ", k, "-shot (first ", k, " of ", spec->fewshot_split, ")")
                                             : absl::StrCat(", ", k, "-shot (Random(1234).sample of ", spec->fewshot_split, ")"));
  if (t.examples.empty()) return absl::InvalidArgumentError(absl::StrCat(t.source, ": no examples"));
  return t;
}

}  // namespace lm::eval
