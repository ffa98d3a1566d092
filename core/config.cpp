#include "core/config.h"

#include <algorithm>
#include <functional>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include "core/file.h"

namespace lm {

namespace {
// nlohmann quotes what it last read, which can be kilobytes of a damaged file.
std::string short_what(const char* what) {
  std::string s(what);
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string last_part(const std::string& dotted) {
  const size_t dot = dotted.rfind('.');
  return dot == std::string::npos ? dotted : dotted.substr(dot + 1);
}

// Command-line text as the JSON of the field it replaces (`like`: the field's current value).
absl::StatusOr<Json> text_as(const Json& like, const std::string& text, const std::string& path) {
  auto wrong = [&](const char* want) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected ", want, ", got '", text, "'"));
  };
  if (like.is_string()) return Json(text);
  if (like.is_boolean()) {
    const std::string t = absl::AsciiStrToLower(text);
    if (t == "true" || t == "on" || t == "1" || t == "yes") return Json(true);
    if (t == "false" || t == "off" || t == "0" || t == "no") return Json(false);
    return wrong("true or false (on/off, 1/0)");
  }
  auto j = parse_json(text, path);
  if (!j.ok()) return wrong(like.is_number() ? "a number" : like.is_array() ? "a JSON array" : "JSON");
  return *j;  // from_json checks the type and range, with the same messages as a config file
}

}  // namespace

namespace config_detail {

std::string nearest_key(const std::string& key, const std::vector<std::string>& candidates) {
  // The same last part in another section first ("lr" -> "optimizer.lr"), then the closest
  // spelling within a third of the key's length ("stepz" -> "steps").
  for (const auto& c : candidates)
    if (last_part(c) == last_part(key) && c != key) return c;
  std::string best;
  size_t best_d = std::max<size_t>(2, key.size() / 3) + 1;
  for (const auto& c : candidates) {
    const size_t d = std::min(edit_distance(key, c), edit_distance(last_part(key), last_part(c)) + 1);
    if (d < best_d) { best_d = d; best = c; }
  }
  return best;
}

absl::Status unknown_key(const std::string& path, const std::string& key, const std::vector<std::string>& known) {
  const std::string near = nearest_key(key, known);
  return absl::InvalidArgumentError(absl::StrCat(join_path(path, key), ": unknown key (",
                                                 near.empty() ? "" : "did you mean '" + near + "'? ",
                                                 "known keys: ", absl::StrJoin(known, ", "), ")"));
}

}  // namespace config_detail

std::vector<std::string> dotted_keys(const Json& j, const std::string& prefix) {
  std::vector<std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = config_detail::join_path(prefix, it.key());
    if (it->is_object()) {
      auto inner = dotted_keys(*it, key);
      out.insert(out.end(), inner.begin(), inner.end());
    } else {
      out.push_back(key);
    }
  }
  return out;
}

absl::StatusOr<Json> dotted_value(const Json& current, const std::string& dotted, const std::string& text,
                                  const std::string& root) {
  const std::vector<std::string> parts = absl::StrSplit(dotted, '.');
  const Json* at = &current;
  for (const auto& part : parts) {
    if (!at->is_object() || !at->contains(part)) {
      const std::vector<std::string> keys = dotted_keys(current);
      const std::string near = config_detail::nearest_key(dotted, keys);
      return absl::InvalidArgumentError(absl::StrCat(
          config_detail::join_path(root, dotted), ": unknown key",
          near.empty() ? "" : " (did you mean '" + near + "'?)", "; keys: ", absl::StrJoin(keys, ", ")));
    }
    at = &(*at)[part];
  }
  const std::string path = config_detail::join_path(root, dotted);
  if (at->is_object())
    return absl::InvalidArgumentError(absl::StrCat(path, ": a section, not a field; set one of ",
                                                   absl::StrJoin(dotted_keys(*at, path), ", ")));
  LM_ASSIGN_OR_RETURN(Json value, text_as(*at, text, path));
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) value = Json{{*it, std::move(value)}};
  return value;
}

namespace {

// Keys set twice in one object: JSON parsers keep the last silently (an earlier optimizer.lr was
// lost). The parser's callback sees each key, then its value (object_end/array_end for a section);
// the first duplicate is kept with both values and its dotted path.
class DuplicateKeys {
 public:
  bool operator()(int /*depth*/, Json::parse_event_t ev, Json& parsed) {
    using E = Json::parse_event_t;
    if (ev == E::object_start || ev == E::array_start) frames_.push_back({ev == E::object_start, {}, {}});
    if (ev == E::key && !frames_.empty()) frames_.back().key = parsed.get<std::string>();
    if (ev == E::object_end || ev == E::array_end) {
      if (!frames_.empty()) frames_.pop_back();
      done(parsed);
    }
    if (ev == E::value) done(parsed);
    return true;
  }
  const std::string& found() const { return found_; }

 private:
  struct Frame {
    bool object;
    std::string key;
    std::map<std::string, std::string> seen;  // key -> its first value, shortened
  };
  void done(const Json& value) {
    if (frames_.empty() || !frames_.back().object) return;
    Frame& f = frames_.back();
    std::string text = value.dump();
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    auto [it, fresh] = f.seen.emplace(f.key, text);
    if (fresh || !found_.empty()) return;
    std::string path;
    for (const Frame& g : frames_) path += g.object ? (path.empty() ? "" : ".") + g.key : "[]";
    found_ = absl::StrCat(path, ": duplicate key, set twice in one object (first ", it->second, ", then ", text,
                          "); a JSON reader keeps only one of them silently: delete the other");
  }
  std::vector<Frame> frames_;
  std::string found_;
};

}  // namespace

absl::StatusOr<Json> parse_json(std::string_view text, const std::string& source, int64_t first_line,
                                bool unique_keys) {
  try {
    if (!unique_keys) return Json::parse(text.begin(), text.end());
    DuplicateKeys dup;
    Json j = Json::parse(text.begin(), text.end(), std::ref(dup));
    if (!dup.found().empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", dup.found()));
    return j;
  } catch (const Json::parse_error& e) {
    // FILE:LINE:COLUMN, as compilers write it, so editors jump there. e.byte is 1-based and
    // points one past the offending character.
    const size_t at = std::min(text.size(), e.byte > 0 ? e.byte - 1 : 0);
    int64_t line = first_line, col = 1;
    for (size_t i = 0; i < at; ++i) {
      if (text[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", line, ":", col, ": not valid JSON: ", short_what(e.what())));
  } catch (const Json::exception& e) {
    // out_of_range 406: a number too large for a double ("2e9000"; found by fuzz_config).
    // Its position is not reported; for one-line text (a JSONL line) the line is still known.
    const std::string at = text.find('\n') == std::string_view::npos ? absl::StrCat(":", first_line) : "";
    return absl::InvalidArgumentError(absl::StrCat(source, at, ": not valid JSON: ", short_what(e.what())));
  }
}

absl::StatusOr<Json> read_json_file(const std::string& path) {
  LM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_json(text, path, 1, /*unique_keys=*/true);
}

absl::Status write_json_file(const std::string& path, const Json& j) {
  return write_file_atomic(path, j.dump(2) + "\n");
}

}  // namespace lm
