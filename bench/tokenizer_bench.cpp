// Tokenizer encode throughput (docs/performance.md): loads a tokenizer folder, reads the documents
// of a corpus manifest (or of --text LANG=FILE, one document per line) into memory (reading is not
// timed), then encodes them all with encode_batch on --threads workers, best of --repeats. Prints a
// human line per language and one JSON line:
//   {"bench": "tokenizer", "mb_per_s": ..., "chars_per_token": {"bn": ..., "en": ...},
//    "tok_per_s": {"bn": ..., "en": ...}, ...}
// bench/hf_tokenizer_speed.py runs it beside HF tokenizers on the same lines (foreign tokenizers).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "core/config.h"
#include "core/log.h"
#include "core/status.h"
#include "corpus/corpus.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Lang {
  std::vector<std::string> docs;
  int64_t bytes = 0, chars = 0, tokens = 0;
};

// --text LANG=FILE: every line of FILE is a document of LANG.
absl::Status read_texts(const std::vector<std::string>& texts, std::map<std::string, Lang>& langs) {
  for (const auto& spec : texts) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos) return absl::InvalidArgumentError("--text " + spec + ": LANG=FILE expected");
    std::ifstream in(spec.substr(eq + 1));
    if (!in) return absl::NotFoundError(spec.substr(eq + 1) + ": cannot open (--text)");
    Lang& l = langs[spec.substr(0, eq)];
    for (std::string line; std::getline(in, line);) l.docs.push_back(line);
  }
  return absl::OkStatus();
}

absl::Status run(const std::string& tok_dir, const std::string& corpus, const std::vector<std::string>& texts,
                 int threads, int repeats, int64_t max_mb) {
  LM_ASSIGN_OR_RETURN(lm::tokenizer::Tokenizer tok, lm::tokenizer::Tokenizer::load(tok_dir));
  std::map<std::string, Lang> langs;
  LM_RETURN_IF_ERROR(read_texts(texts, langs));
  lm::data::CorpusManifest m;
  if (!corpus.empty()) {
    LM_ASSIGN_OR_RETURN(m, lm::data::load_manifest(corpus));
  }
  int64_t total_bytes = 0;
  for (const auto& src : m.sources) {
    Lang& l = langs[src.lang];
    lm::data::ReadStats st;
    LM_RETURN_IF_ERROR(lm::data::for_each_document(
        m, src, {}, [&](const std::string& doc) {
          if (total_bytes > max_mb * 1000000) return lm::data::stop_reading();
          l.docs.push_back(doc);
          total_bytes += static_cast<int64_t>(doc.size());
          return absl::OkStatus();
        },
        &st));
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  double total_s = 0;
  lm::Json cpt = lm::Json::object(), tps = lm::Json::object();
  for (auto& [name, l] : langs) {
    if (l.docs.empty()) continue;
    l.bytes = l.chars = l.tokens = 0;
    for (const auto& d : l.docs) {
      l.bytes += static_cast<int64_t>(d.size());
      for (unsigned char c : d) l.chars += (c & 0xC0) != 0x80;  // code points
    }
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      const auto t = Clock::now();
      auto ids = tok.encode_batch(l.docs, threads);
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t).count());
      int64_t n = 0;
      for (const auto& v : ids) n += static_cast<int64_t>(v.size());
      l.tokens = n;
    }
    total_s += best;
    std::printf("%s: %zu docs, %.2f MB, %.2f MB/s, %.0f tok/s on %d threads, %.2f chars/token\n", name.c_str(),
                l.docs.size(), l.bytes / 1e6, l.bytes / 1e6 / best, l.tokens / best, threads,
                static_cast<double>(l.chars) / std::max<int64_t>(1, l.tokens));
    cpt[name] = static_cast<double>(l.chars) / std::max<int64_t>(1, l.tokens);
    tps[name] = l.tokens / best;
  }
  int64_t bytes = 0;
  for (const auto& [n, l] : langs) bytes += l.bytes;
  lm::Json j{{"bench", "tokenizer"}, {"threads", threads}, {"mb", bytes / 1e6},
             {"mb_per_s", total_s > 0 ? bytes / 1e6 / total_s : 0.0}, {"chars_per_token", cpt},
             {"tok_per_s", tps}, {"type", tok.type()},
             {"vocab_size", tok.vocab_size()}};
  std::printf("%s\n", j.dump().c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tokenizer encode throughput (MB/s) and fertility on a corpus"};
  std::string tok_dir, corpus;
  std::vector<std::string> texts;
  int threads = 0, repeats = 3;
  int64_t max_mb = 64;
  app.add_option("--tokenizer", tok_dir, "tokenizer folder (lmtrain tokenizer --out)")->required();
  app.add_option("--corpus", corpus, "corpus.json manifest");
  app.add_option("--text", texts, "LANG=FILE: one document per line (instead of or beside --corpus)");
  app.add_option("--threads", threads, "encode workers (0 = all cores)");
  app.add_option("--repeats", repeats, "timed passes; the best is reported")->capture_default_str();
  app.add_option("--max-mb", max_mb, "read at most this many MB of text")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  lm::init_output(true);
  if (corpus.empty() && texts.empty()) {
    std::fprintf(stderr, "tokenizer_bench: --corpus or --text is required\n");
    return 2;
  }
  absl::Status st = run(tok_dir, corpus, texts, threads, std::max(1, repeats), max_mb);
  return st.ok() ? 0 : lm::report_error(st);
}
