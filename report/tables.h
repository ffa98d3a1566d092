// The evaluation tables of report.html, from the JSON `lmeval nll` and `lmeval mc` write to
// runs/NAME/eval/: fixed, meaningful column orders (the ones lmeval prints on screen,
// app/eval_tables.cpp) with formatted numbers, instead of the JSON's alphabetical keys.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace lm::report {

// Column headers, in order (tests check them; the doc page lists them).
const std::vector<std::string>& nll_columns();
const std::vector<std::string>& mc_columns();

// One row per language: tokens, windows, model nats/token, twin nats/token, difference (twin -
// model), model and twin bits/byte, perplexity, bits/char; a line above says how the text was
// framed (docs, seq_len, stride) and which evaluation file this is. Twin columns show "–"
// without --twin.
std::string nll_table_html(const Json& nll);

// One row per task: n, chance, acc ± stderr, acc_norm ± stderr ("–" where the harness reports acc
// only), twin acc, acc - twin acc, McNemar p of acc and acc_norm (bold below 0.05), split; a line
// above gives the prefix, limit and missing tasks.
std::string mc_table_html(const Json& mc);

// `v` as "%.{digits}f", "–" when absent or not a number.
std::string fixed(const Json& v, int digits);

}  // namespace lm::report
