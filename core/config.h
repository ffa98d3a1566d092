// Strict JSON for plain config structs.
//
// A struct opts in with one member template that names its fields once:
//   struct ModelConfig {
//     int64_t n_layers = 2;
//     template <class V> void visit(V& v) { v("n_layers", n_layers); }
//   };
// from_json() then rejects unknown keys and wrong types with the dotted path of the field
// ("model.n_layers: expected an integer, got string"), and to_json() writes the resolved config.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace lm {

using Json = nlohmann::json;

namespace config_detail {

template <class T, class = void>
struct has_visit : std::false_type {};
// A struct may also declare `static absl::Status check_json(const Json& j, const std::string& path)`,
// called before its fields are read: a layout the struct outgrew (TrainConfig's flat keys) is then
// refused with its own message instead of one "unknown key" per old field.
template <class T, class = void>
struct has_check_json : std::false_type {};
template <class T>
struct has_check_json<T, std::void_t<decltype(T::check_json(std::declval<const Json&>(), std::string()))>>
    : std::true_type {};
template <class T>
struct has_visit<T, std::void_t<decltype(std::declval<T&>().visit(std::declval<int&>()))>>
    : std::true_type {};

inline std::string join_path(const std::string& base, const std::string& key) {
  return base.empty() ? key : base + "." + key;
}

inline const char* type_name(const Json& j) { return j.type_name(); }

// The candidate closest to `key` by edit distance ("" when none is close), for "did you mean".
std::string nearest_key(const std::string& key, const std::vector<std::string>& candidates);

// "path: unknown key (did you mean 'x'? known keys: a, b, c)".
absl::Status unknown_key(const std::string& path, const std::string& key, const std::vector<std::string>& known);

template <class T>
absl::Status read_value(const Json& j, T& out, const std::string& path);

template <class T>
Json write_value(const T& value);

class Reader {
 public:
  Reader(const Json& j, std::string path) : j_(j), path_(std::move(path)) {}
  template <class T>
  void operator()(const char* key, T& field) {
    seen_.insert(key);
    if (!status_.ok()) return;
    auto it = j_.find(key);
    if (it == j_.end()) return;  // missing keys keep their defaults
    status_ = read_value(*it, field, join_path(path_, key));
  }
  absl::Status finish() {
    if (!status_.ok()) return status_;
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!seen_.count(it.key()))
        return unknown_key(path_, it.key(), std::vector<std::string>(seen_.begin(), seen_.end()));
    }
    return absl::OkStatus();
  }

 private:
  const Json& j_;
  std::string path_;
  std::set<std::string> seen_;
  absl::Status status_;
};

class Writer {
 public:
  template <class T>
  void operator()(const char* key, const T& field) {
    j_[key] = write_value(field);
  }
  Json take() { return std::move(j_); }

 private:
  Json j_ = Json::object();
};

template <class T>
absl::Status read_value(const Json& j, T& out, const std::string& path) {
  auto wrong = [&](const char* want) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected ", want, ", got ", type_name(j), " ", j.dump()));
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) return wrong("true or false");
    out = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    // The value must fit T: a silent wrap ("threads": 4294967297 read as 1) is wrong, and a
    // float outside T's range converted with static_cast is undefined behaviour (fuzz_config).
    // [lo, hi) as doubles: hi = 2^digits is exact, so the bounds are exact too.
    using L = std::numeric_limits<T>;
    const double hi = std::ldexp(1.0, L::digits), lo = L::is_signed ? -hi : 0.0;
    auto range = [&] {
      return wrong(absl::StrCat("an integer in [", L::min(), ", ", L::max(), "]").c_str());
    };
    if (j.is_number_unsigned()) {
      const uint64_t v = j.get<uint64_t>();
      if (v > static_cast<uint64_t>(L::max())) return range();
      out = static_cast<T>(v);
    } else if (j.is_number_integer()) {
      const int64_t v = j.get<int64_t>();
      if constexpr (L::is_signed) {
        if (v < static_cast<int64_t>(L::min()) || v > static_cast<int64_t>(L::max())) return range();
      } else {
        if (v < 0) return wrong("a non-negative integer");
        if (static_cast<uint64_t>(v) > static_cast<uint64_t>(L::max())) return range();
      }
      out = static_cast<T>(v);
    } else if (j.is_number_float() && std::floor(j.get<double>()) == j.get<double>()) {
      // Accept 2e9 written as a float only when it is an exact integer.
      const double d = j.get<double>();
      if (!(d >= lo && d < hi)) return range();
      out = static_cast<T>(d);
    } else {
      return wrong("an integer");
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number()) return wrong("a number");
    out = j.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) return wrong("a string");
    out = j.get<std::string>();
  } else if constexpr (has_visit<T>::value) {
    if (!j.is_object()) return wrong("an object");
    if constexpr (has_check_json<T>::value) LM_RETURN_IF_ERROR(T::check_json(j, path));
    Reader r(j, path);
    out.visit(r);
    return r.finish();
  } else {
    // std::vector<U>
    if (!j.is_array()) return wrong("an array");
    using U = typename T::value_type;
    T result;
    for (size_t i = 0; i < j.size(); ++i) {
      U item{};
      LM_RETURN_IF_ERROR(read_value(j[i], item, absl::StrCat(path, "[", i, "]")));
      result.push_back(std::move(item));
    }
    out = std::move(result);
  }
  return absl::OkStatus();
}

template <class T>
Json write_value(const T& value) {
  if constexpr (has_visit<T>::value) {
    Writer w;
    const_cast<T&>(value).visit(w);
    return w.take();
  } else if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, std::string>) {
    return Json(value);
  } else {
    Json arr = Json::array();
    for (const auto& item : value) arr.push_back(write_value(item));
    return arr;
  }
}

}  // namespace config_detail

// Reads fields of `out` from `j`; keys absent in `j` keep `out`'s current values, so
// layering (defaults < file < flags) is a chain of calls. `path` prefixes error messages.
template <class T>
absl::Status from_json(const Json& j, T& out, const std::string& path = "") {
  return config_detail::read_value(j, out, path);
}

template <class T>
Json to_json(const T& value) {
  return config_detail::write_value(value);
}

// One field of a config struct from command-line text, by dotted key ("optimizer.lr", "3e-4"):
// the key must name a field (an unknown one suggests the nearest dotted key), the text is read as
// that field's type (a string as is; a bool as true/false/on/off/1/0; a number or array as JSON)
// and then goes through from_json, so the type and range checks are the config file's. `root`
// prefixes paths in messages ("train"). Returns the {"optimizer": {"lr": 3e-4}} object applied.
absl::StatusOr<Json> dotted_value(const Json& current, const std::string& dotted, const std::string& text,
                                  const std::string& root);

template <class T>
absl::Status set_dotted(T& out, const std::string& dotted, const std::string& text, const std::string& root = "") {
  LM_ASSIGN_OR_RETURN(Json j, dotted_value(to_json(out), dotted, text, root));
  return from_json(j, out, root);
}

// Every leaf of a JSON object as a dotted key ("optimizer.lr"), in the object's order.
std::vector<std::string> dotted_keys(const Json& j, const std::string& prefix = "");

// Parses JSON text; the error names SOURCE:LINE:COLUMN (LINE counted from `first_line`, for text
// that is one line of a larger file) and quotes at most ~200 characters of the parser's message.
// `unique_keys`: a key set twice in one object is an error naming its dotted path and both values.
absl::StatusOr<Json> parse_json(std::string_view text, const std::string& source, int64_t first_line = 1,
                                bool unique_keys = false);

// Reads and parses a JSON file; a missing file, a syntax error or a duplicate key names the file.
absl::StatusOr<Json> read_json_file(const std::string& path);

// Atomically writes `j` (pretty-printed) to `path`.
absl::Status write_json_file(const std::string& path, const Json& j);

// Loads a config struct from a JSON file strictly; errors are prefixed with the file name.
template <class T>
absl::Status load_config_file(const std::string& path, T& out) {
  LM_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  return annotate(from_json(j, out), path);
}

}  // namespace lm
