#include "eval/tasks.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/config.h"
#include "core/file.h"
#include "corpus/corpus.h"
#include "corpus/text_file.h"
#include "eval/tasks_bn.h"

namespace lm::eval {
namespace fs = std::filesystem;
using data::nfc;
using data::parse_csv;
using data::read_text_file;

namespace {

// Python's str.strip(): ASCII whitespace at both ends.
std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// First character lower-cased (ASCII), as COPA's convert_choice.
std::string lower_first(const std::string& s) {
  if (s.empty()) return s;
  std::string out = s;
  if (static_cast<unsigned char>(out[0]) < 0x80) out[0] = static_cast<char>(std::tolower(out[0]));
  return out;
}

// Drops the last code point (Python's s[:-1] on str, not bytes).
std::string drop_last_char(const std::string& s) {
  if (s.empty()) return s;
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return s.substr(0, i);
}

absl::Status not_found(const std::string& task, const std::string& expected) {
  return absl::NotFoundError(absl::StrCat(task, ": not found, expected ", expected,
                                          " (see docs/eval.md for the files each task reads)"));
}

// First file in `dir` (sorted by name) whose name ends with one of `suffixes`, tried in order.
std::string find_file(const std::string& dir, const std::vector<std::string>& suffixes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const auto& suf : suffixes)
    for (const auto& n : names)
      if (n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0)
        return dir + "/" + n;
  return "";
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  for (auto& l : lines)
    if (!l.empty() && l.back() == '\r') l.pop_back();
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// Calls fn(json, line_number) for every non-empty line of a JSONL file.
template <class F>
absl::Status for_each_jsonl(const std::string& path, F fn) {
  LM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  const auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (strip(lines[i]).empty()) continue;
    const std::string where = absl::StrCat(path, ":", i + 1);
    LM_ASSIGN_OR_RETURN(Json j, parse_json(lines[i], path, static_cast<int64_t>(i + 1)));
    try {
      LM_RETURN_IF_ERROR(fn(j, where));
    } catch (const Json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", e.what(), " (is this the original file format?)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> read_labels(const std::string& path) {
  LM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  std::vector<int> labels;
  const auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string l = strip(lines[i]);
    if (l.empty()) continue;
    int v = 0;
    if (!absl::SimpleAtoi(l, &v))
      return absl::InvalidArgumentError(absl::StrCat(path, ":", i + 1, ": expected an integer label, got '", l, "'"));
    labels.push_back(v);
  }
  return labels;
}

// AI2 format (ARC, OpenBookQA): question{stem, choices[{text,label}]}, answerKey.
absl::Status ai2_fields(const Json& j, const std::string& where, std::string& stem,
                        std::vector<std::string>& texts, int& gold) {
  stem = j.at("question").at("stem").get<std::string>();
  std::vector<std::string> labels;
  texts.clear();
  for (const auto& c : j.at("question").at("choices")) {
    texts.push_back(c.at("text").get<std::string>());
    labels.push_back(c.at("label").get<std::string>());
  }
  std::string key = j.at("answerKey").get<std::string>();
  key.erase(0, key.find_first_not_of(' '));  // the harness lstrip()s OpenBookQA's key
  auto it = std::find(labels.begin(), labels.end(), key);
  if (it == labels.end())
    return absl::InvalidArgumentError(absl::StrCat(where, ": answerKey '", key, "' is not one of the choice labels"));
  gold = static_cast<int>(it - labels.begin());
  return absl::OkStatus();
}

std::string xml_unescape(std::string s) {
  s = replace_all(s, "&lt;", "<");
  s = replace_all(s, "&gt;", ">");
  s = replace_all(s, "&quot;", "\"");
  s = replace_all(s, "&apos;", "'");
  return replace_all(s, "&amp;", "&");
}

std::string xml_attr(const std::string& tag, const std::string& name) {
  const std::string key = name + "=\"";
  const size_t p = tag.find(key);
  if (p == std::string::npos) return "";
  const size_t b = p + key.size();
  return tag.substr(b, tag.find('"', b) - b);
}

std::string xml_element(const std::string& body, const std::string& name) {
  const size_t b = body.find("<" + name + ">");
  const size_t e = body.find("</" + name + ">");
  if (b == std::string::npos || e == std::string::npos) return "";
  return xml_unescape(strip(body.substr(b + name.size() + 2, e - b - name.size() - 2)));
}

absl::Status load_hellaswag(const std::string& dir, McTask& t) {
  t.source = find_file(dir, {"hellaswag_val.jsonl", ".txt.bz2", ".txt"});
  if (t.source.empty())
    return not_found(t.name, dir + "/hellaswag_val.jsonl or " + dir + "/hellaswag_val_full.txt.bz2");
  t.split = "validation";
  if (absl::EndsWith(t.source, ".jsonl")) {
    return for_each_jsonl(t.source, [&](const Json& j, const std::string&) {
      std::vector<std::string> endings = j.at("endings").get<std::vector<std::string>>();
      const int label = j.at("label").is_string() ? std::stoi(j.at("label").get<std::string>())
                                                  : j.at("label").get<int>();
      McExample ex = hellaswag_from_fields(j.at("activity_label"), j.at("ctx_a"), j.at("ctx_b"),
                                           endings, label);
      ex.id = j.contains("ind") ? j.at("ind").dump() : std::to_string(t.examples.size());
      t.examples.push_back(std::move(ex));
      return absl::OkStatus();
    });
  }
  // llama.cpp text export: 6 lines per item (query, label, 4 endings), mostly preprocessed
  // (13 items keep "[...]" spans), ctx_b not capitalised: fields recovered, then the harness's steps.
  LM_ASSIGN_OR_RETURN(std::string text, read_text_file(t.source));
  const auto lines = split_lines(text);
  int64_t restored = 0;
  if (lines.size() % 6 != 0)
    return absl::DataLossError(absl::StrCat(t.source, ": ", lines.size(),
                                            " lines is not a multiple of 6 (query, label, 4 endings per item)"));
  for (size_t i = 0; i < lines.size(); i += 6) {
    int label = -1;
    if (!absl::SimpleAtoi(lines[i + 1], &label) || label < 0 || label > 3)
      return absl::InvalidArgumentError(absl::StrCat(t.source, ":", i + 2, ": expected a label 0-3, got '",
                                                     lines[i + 1], "'"));
    const HellaswagFields f = hellaswag_split_export_line(lines[i]);
    restored += !f.ctx_b.empty();
    McExample ex = hellaswag_from_fields(f.activity_label, f.ctx_a, f.ctx_b,
                                         {lines[i + 2], lines[i + 3], lines[i + 4], lines[i + 5]}, label);
    ex.id = std::to_string(i / 6);
    t.examples.push_back(std::move(ex));
  }
  t.note = absl::StrCat("text export: ctx_b recovered and capitalised in ", restored, " of ", t.examples.size(),
                        " items (the last sentence's lower-case start; docs/eval.md)");
  return absl::OkStatus();
}

absl::Status load_piqa(const std::string& dir, McTask& t) {
  t.source = dir + "/valid.jsonl";
  const std::string labels_path = dir + "/valid-labels.lst";
  if (!fs::exists(t.source)) return not_found(t.name, t.source);
  if (!fs::exists(labels_path)) return not_found(t.name, labels_path);
  t.split = "validation";
  LM_ASSIGN_OR_RETURN(std::vector<int> labels, read_labels(labels_path));
  LM_RETURN_IF_ERROR(for_each_jsonl(t.source, [&](const Json& j, const std::string& where) {
    const size_t k = t.examples.size();
    if (k >= labels.size())
      return absl::InvalidArgumentError(absl::StrCat(where, ": more examples than labels in ", labels_path));
    McExample ex = question_answer_example(j.at("goal"), {j.at("sol1"), j.at("sol2")}, labels[k]);
    ex.id = std::to_string(k);
    t.examples.push_back(std::move(ex));
    return absl::OkStatus();
  }));
  if (labels.size() != t.examples.size())
    return absl::InvalidArgumentError(absl::StrCat(labels_path, ": ", labels.size(), " labels for ",
                                                   t.examples.size(), " examples in ", t.source));
  return absl::OkStatus();
}

absl::Status load_winogrande(const std::string& dir, McTask& t) {
  t.acc_only = true;
  t.source = dir + "/dev.jsonl";
  if (!fs::exists(t.source)) return not_found(t.name, t.source);
  t.split = "dev (= the harness's winogrande_xl validation)";
  return for_each_jsonl(t.source, [&](const Json& j, const std::string& where) -> absl::Status {
    const std::string a = j.at("answer").get<std::string>();
    if (a != "1" && a != "2")
      return absl::InvalidArgumentError(absl::StrCat(where, ": answer must be \"1\" or \"2\", got '", a, "'"));
    auto ex = winogrande_example(j.at("sentence"), j.at("option1"), j.at("option2"), a == "1" ? 1 : 2);
    if (!ex.ok()) return annotate(ex.status(), where);
    ex->id = j.value("qID", std::to_string(t.examples.size()));
    t.examples.push_back(std::move(*ex));
    return absl::OkStatus();
  });
}

absl::Status load_ai2(const std::string& dir, McTask& t, bool obqa) {
  if (obqa) {
    t.source = dir + "/test.jsonl";
    if (!fs::exists(t.source)) return not_found(t.name, t.source);
    t.split = "test (main)";
  } else {
    t.source = find_file(dir, {"-Test.jsonl", "-Dev.jsonl"});
    const std::string stem = t.name == "arc_easy" ? "ARC-Easy" : "ARC-Challenge";
    if (t.source.empty()) return not_found(t.name, dir + "/" + stem + "-Test.jsonl or " + stem + "-Dev.jsonl");
    t.split = absl::EndsWith(t.source, "-Test.jsonl") ? "test" : "dev (the harness reports test; Test is not in the data)";
  }
  return for_each_jsonl(t.source, [&](const Json& j, const std::string& where) {
    std::string stem;
    std::vector<std::string> texts;
    int gold = 0;
    LM_RETURN_IF_ERROR(ai2_fields(j, where, stem, texts, gold));
    McExample ex = obqa ? openbookqa_example(stem, texts, gold) : question_answer_example(stem, texts, gold);
    ex.id = j.at("id").get<std::string>();
    t.examples.push_back(std::move(ex));
    return absl::OkStatus();
  });
}

absl::Status load_copa(const std::string& dir, McTask& t) {
  t.acc_only = true;
  const std::string jsonl = dir + "/val.jsonl";
  if (fs::exists(jsonl)) {
    t.source = jsonl;
    t.split = "validation (SuperGLUE val.jsonl)";
    return for_each_jsonl(t.source, [&](const Json& j, const std::string& where) {
      McExample ex = copa_example(j.at("premise"), j.at("question"), j.at("choice1"), j.at("choice2"),
                                  j.at("label").get<int>());
      ex.id = j.contains("idx") ? j.at("idx").dump() : std::to_string(t.examples.size());
      t.examples.push_back(std::move(ex));
      return absl::OkStatus();
    });
  }
  t.source = find_file(dir, {".xml"});
  if (t.source.empty()) return not_found(t.name, jsonl + " (SuperGLUE) or " + dir + "/balanced-copa-dev-all.xml");
  t.split = "validation (COPA-dev ids 401-500 from the XML)";
  LM_ASSIGN_OR_RETURN(std::string text, read_text_file(t.source));
  size_t pos = 0;
  while ((pos = text.find("<item ", pos)) != std::string::npos) {
    const size_t tag_end = text.find('>', pos);
    const size_t end = text.find("</item>", pos);
    if (tag_end == std::string::npos || end == std::string::npos)
      return absl::DataLossError(absl::StrCat(t.source, ": unterminated <item> at byte ", pos));
    const std::string tag = text.substr(pos, tag_end - pos);
    const std::string body = text.substr(tag_end + 1, end - tag_end - 1);
    pos = end;
    const int id = std::atoi(xml_attr(tag, "id").c_str());
    if (id < 401 || id > 500) continue;  // 1-400 SuperGLUE train, 1001+ Balanced-COPA mirrors
    const std::string mpa = xml_attr(tag, "most-plausible-alternative");
    McExample ex = copa_example(xml_element(body, "p"), xml_attr(tag, "asks-for"), xml_element(body, "a1"),
                                xml_element(body, "a2"), mpa == "2" ? 1 : 0);
    ex.id = std::to_string(id);
    t.examples.push_back(std::move(ex));
  }
  return absl::OkStatus();
}

absl::Status load_benqa(const std::string& dir, McTask& t, bool bangla) {
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".csv") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) return not_found(t.name, dir + "/*.csv (BEnQA)");
  t.source = absl::StrJoin(files, ",");
  t.split = "all files";
  int64_t skipped = 0;
  for (const auto& f : files) {
    LM_ASSIGN_OR_RETURN(std::string text, read_text_file(f));
    LM_ASSIGN_OR_RETURN(auto rows, parse_csv(text, f));
    if (rows.empty()) continue;
    std::map<std::string, size_t> col;
    for (size_t i = 0; i < rows[0].size(); ++i) col[strip(rows[0][i])] = i;
    const std::vector<std::string> need =
        bangla ? std::vector<std::string>{"Bengali Question", "A Bn", "B Bn", "C Bn", "D Bn", "Correct Answer"}
               : std::vector<std::string>{"English Question", "A", "B", "C", "D", "Correct Answer"};
    for (const auto& n : need)
      if (!col.count(n)) return absl::InvalidArgumentError(absl::StrCat(f, ":1: missing column '", n, "'"));
    const std::string fname = fs::path(f).filename().string();
    for (size_t r = 1; r < rows.size(); ++r) {
      const auto& row = rows[r];
      auto cell = [&](const std::string& n) { return col[n] < row.size() ? nfc(strip(row[col[n]])) : std::string(); };
      const std::string ans = cell("Correct Answer");
      const int gold = ans.size() == 1 ? std::tolower(ans[0]) - 'a' : -1;
      std::vector<std::string> choices = {cell(need[1]), cell(need[2]), cell(need[3]), cell(need[4])};
      const bool empty_choice = std::any_of(choices.begin(), choices.end(), [](const std::string& c) { return c.empty(); });
      if (gold < 0 || gold > 3 || cell(need[0]).empty() || empty_choice) {
        ++skipped;  // malformed row: no usable answer letter or an empty field
        continue;
      }
      McExample ex = bangla ? question_answer_example(cell(need[0]), choices, gold, "প্রশ্ন", "উত্তর")
                            : question_answer_example(cell(need[0]), choices, gold);
      ex.id = absl::StrCat(fname, ":", r + 1);
      t.examples.push_back(std::move(ex));
    }
  }
  if (skipped > 0) t.split += absl::StrCat(" (", skipped, " malformed rows skipped)");
  return absl::OkStatus();
}

}  // namespace

double McTask::chance() const {
  if (examples.empty()) return 0.0;
  double s = 0;
  for (const auto& e : examples) s += 1.0 / static_cast<double>(e.contexts.size());
  return s / static_cast<double>(examples.size());
}

std::vector<std::string> task_names() {
  std::vector<std::string> names = {"hellaswag", "piqa", "arc_easy", "arc_challenge", "copa", "winogrande", "openbookqa",
                                    "benqa_bn", "benqa_en"};
  for (const auto& n : bangla_task_names()) names.push_back(n);
  return names;
}

absl::StatusOr<McTask> load_task(const std::string& name, const std::string& data_dir, int64_t limit,
                                 int64_t num_fewshot) {
  if (is_bangla_task(name)) return load_bangla_task(name, data_dir, limit, num_fewshot);
  if (num_fewshot > 0)
    return absl::InvalidArgumentError(absl::StrCat(name, ": --num-fewshot ", num_fewshot,
                                                   ": the English tasks and BEnQA are scored zero-shot only"));
  McTask t;
  t.name = name;
  absl::Status st;
  if (name == "hellaswag") st = load_hellaswag(data_dir + "/hellaswag", t);
  else if (name == "piqa") st = load_piqa(data_dir + "/piqa", t);
  else if (name == "winogrande") st = load_winogrande(data_dir + "/winogrande", t);
  else if (name == "openbookqa") st = load_ai2(data_dir + "/openbookqa", t, true);
  else if (name == "arc_easy" || name == "arc_challenge") st = load_ai2(data_dir + "/" + name, t, false);
  else if (name == "copa") st = load_copa(data_dir + "/copa", t);
  else if (name == "benqa_bn" || name == "benqa_en") st = load_benqa(data_dir + "/benqa", t, name == "benqa_bn");
  else
    return absl::InvalidArgumentError(absl::StrCat("--tasks: unknown task '", name, "' (known: ",
                                                   absl::StrJoin(task_names(), ","), ", benqa = both)"));
  LM_RETURN_IF_ERROR(st);
  if (t.examples.empty()) return absl::InvalidArgumentError(absl::StrCat(t.source, ": no examples"));
  if (limit > 0 && static_cast<int64_t>(t.examples.size()) > limit) t.examples.resize(limit);
  return t;
}

std::string hellaswag_preprocess(const std::string& text) {
  std::string s = strip(text);
  s = replace_all(s, " [title]", ". ");
  static const std::regex brackets("\\[.*?\\]");
  s = std::regex_replace(s, brackets, "");
  return replace_all(s, "  ", " ");
}

namespace {
// One context shared by every choice, each continued by " " + choice (normalised by its own text).
McExample shared_context_example(const std::string& ctx, const std::vector<std::string>& choices, int gold) {
  McExample ex;
  for (const auto& c : choices) {
    ex.contexts.push_back(ctx);
    ex.continuations.push_back(" " + c);
    ex.norm_text.push_back(c);
  }
  ex.gold = gold;
  return ex;
}
}  // namespace

McExample hellaswag_example(const std::string& query, const std::vector<std::string>& endings, int label) {
  return shared_context_example(query, endings, label);
}

McExample hellaswag_from_fields(const std::string& activity_label, const std::string& ctx_a,
                                const std::string& ctx_b, const std::vector<std::string>& endings, int label) {
  const std::string query = hellaswag_preprocess(activity_label + ": " + ctx_a + " " + data::python_capitalize(ctx_b));
  std::vector<std::string> pre;
  for (const auto& e : endings) pre.push_back(hellaswag_preprocess(e));
  return hellaswag_example(query, pre, label);
}

HellaswagFields hellaswag_split_export_line(const std::string& line) {
  HellaswagFields f;
  const size_t colon = line.find(": ");
  if (colon == std::string::npos) {
    f.ctx_a = line;
    return f;
  }
  f.activity_label = line.substr(0, colon);
  const std::string ctx = line.substr(colon + 2);
  size_t start = 0;  // just after the last ". ", "! " or "? "
  for (size_t i = 0; i + 1 < ctx.size(); ++i)
    if ((ctx[i] == '.' || ctx[i] == '!' || ctx[i] == '?') && ctx[i + 1] == ' ') start = i + 2;
  if (start > 0 && start < ctx.size() && ctx[start] >= 'a' && ctx[start] <= 'z') {
    f.ctx_a = ctx.substr(0, start - 1);  // ctx = ctx_a + " " + ctx_b
    f.ctx_b = ctx.substr(start);
  } else {
    f.ctx_a = ctx;
  }
  return f;
}

McExample question_answer_example(const std::string& question, const std::vector<std::string>& choices,
                                  int gold, const std::string& question_word, const std::string& answer_word) {
  return shared_context_example(question_word + ": " + question + "\n" + answer_word + ":", choices, gold);
}

McExample openbookqa_example(const std::string& stem, const std::vector<std::string>& choices, int gold) {
  return shared_context_example(stem, choices, gold);
}

McExample copa_example(const std::string& premise, const std::string& question, const std::string& choice1,
                       const std::string& choice2, int label) {
  McExample ex;
  const std::string connector = question == "cause" ? "because" : "therefore";
  const std::string ctx = drop_last_char(strip(premise)) + " " + connector;
  for (const auto& c : {choice1, choice2}) {
    const std::string choice = " " + lower_first(c);  // harness doc_to_choice
    ex.contexts.push_back(ctx);
    ex.continuations.push_back(" " + choice);        // + target_delimiter: two spaces
    ex.norm_text.push_back(choice);
  }
  ex.gold = label;
  return ex;
}

absl::StatusOr<McExample> winogrande_example(const std::string& sentence, const std::string& option1,
                                             const std::string& option2, int answer) {
  const size_t blank = sentence.find('_');
  if (blank == std::string::npos)
    return absl::InvalidArgumentError("winogrande sentence has no '_' blank: " + sentence);
  McExample ex;
  const std::string rest = " " + strip(sentence.substr(blank + 1));
  for (const auto& o : {option1, option2}) {
    ex.contexts.push_back(sentence.substr(0, blank) + o);
    ex.continuations.push_back(rest);
    // The harness's doc_to_choice is the context here; its acc_norm divides by that length.
    ex.norm_text.push_back(sentence.substr(0, blank) + o);
  }
  ex.gold = answer - 1;
  return ex;
}

}  // namespace lm::eval
