#include "tokenizer/merge.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tokenizer/model_proto.h"

namespace lm::tokenizer {
namespace {

bool single_code_point(const std::string& s) {
  if (s.empty()) return false;
  const auto c = static_cast<unsigned char>(s[0]);
  const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  return s.size() == len;
}

struct Candidate {
  double key;
  size_t lang;
  const std::string* piece;
};

// The parsed models, checked to share the specials and byte pieces (same ids, same order).
absl::StatusOr<std::vector<ModelParts>> parse_all(const std::vector<LanguageModel>& models, size_t* n_meta) {
  std::vector<ModelParts> parts(models.size());
  for (size_t l = 0; l < models.size(); ++l) {
    if (!parse_model_parts(models[l].model, &parts[l]))
      return absl::InvalidArgumentError(absl::StrCat("merge: the '", models[l].lang, "' model does not parse"));
  }
  const auto& first = parts[0].pieces;
  *n_meta = 0;
  while (*n_meta < first.size() && first[*n_meta].type != kNormalPiece) ++*n_meta;
  for (size_t l = 0; l < parts.size(); ++l) {
    const auto& p = parts[l].pieces;
    for (size_t i = 0; i < p.size(); ++i) {
      const bool meta = i < *n_meta;
      if (meta != (p[i].type != kNormalPiece) || (meta && p[i].piece != first[i].piece))
        return absl::InvalidArgumentError(absl::StrFormat(
            "merge: the '%s' model's piece %d ('%s') differs from the '%s' model's specials and byte pieces (train "
            "every language with the same recipe)", models[l].lang, i, p[i].piece, models[0].lang));
    }
  }
  return parts;
}

// Per language: its model's normal pieces, those kept, and those kept that another model has too.
std::vector<MergedLanguage> merge_stats(const std::vector<LanguageModel>& models, const std::vector<ModelParts>& parts,
                                        size_t n_meta, const std::set<std::string>& kept) {
  std::map<std::string, int> owners;
  for (const auto& p : parts)
    for (size_t i = n_meta; i < p.pieces.size(); ++i) ++owners[p.pieces[i].piece];
  std::vector<MergedLanguage> out;
  for (size_t l = 0; l < models.size(); ++l) {
    MergedLanguage s{models[l].lang, static_cast<int64_t>(parts[l].pieces.size() - n_meta)};
    for (size_t i = n_meta; i < parts[l].pieces.size(); ++i) {
      const std::string& piece = parts[l].pieces[i].piece;
      if (!kept.count(piece)) continue;
      ++s.kept;
      if (owners[piece] > 1) ++s.shared;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> merge_unigram_models(const std::vector<LanguageModel>& models, int64_t vocab_size,
                                                 std::vector<MergedLanguage>* stats) {
  if (models.empty()) return absl::InvalidArgumentError("merge: no models");
  size_t n_meta = 0;
  LM_ASSIGN_OR_RETURN(std::vector<ModelParts> parts, parse_all(models, &n_meta));
  const int64_t room = vocab_size - static_cast<int64_t>(n_meta);
  double mixture_sum = 0;
  for (const auto& m : models) mixture_sum += m.mixture;
  // piece -> mixture probability sum_l mixture_l * p_l(piece); kept pieces.
  std::map<std::string, double> prob;
  std::vector<Candidate> order;
  std::set<std::string> kept;
  for (size_t l = 0; l < models.size(); ++l) {
    auto& p = parts[l].pieces;
    std::stable_sort(p.begin() + static_cast<long>(n_meta), p.end(),
                     [](const ModelPiece& a, const ModelPiece& b) { return a.score > b.score; });
    for (size_t i = n_meta; i < p.size(); ++i) {
      prob[p[i].piece] += models[l].mixture / mixture_sum * std::exp(static_cast<double>(p[i].score));
      if (single_code_point(p[i].piece)) kept.insert(p[i].piece);
      const double share = std::max(models[l].vocab_share, 1e-9);
      order.push_back({static_cast<double>(i - n_meta) / share, l, &p[i].piece});
    }
  }
  if (static_cast<int64_t>(prob.size()) < room)
    return absl::InvalidArgumentError(absl::StrFormat(
        "merge: the per-language models hold %d distinct pieces, fewer than the %d a vocabulary of %d needs (train "
        "them larger or lower --vocab-size)", prob.size(), room, vocab_size));
  if (static_cast<int64_t>(kept.size()) > room)
    return absl::InvalidArgumentError(absl::StrFormat(
        "merge: the models hold %d single characters, more than the vocabulary's %d pieces (raise --vocab-size)",
        kept.size(), room));
  std::stable_sort(order.begin(), order.end(), [](const Candidate& a, const Candidate& b) { return a.key < b.key; });
  for (size_t k = 0; k < order.size() && static_cast<int64_t>(kept.size()) < room; ++k) kept.insert(*order[k].piece);

  ModelParts out;
  out.other = parts[0].other;
  out.pieces.assign(parts[0].pieces.begin(), parts[0].pieces.begin() + static_cast<long>(n_meta));
  std::vector<ModelPiece> normal;
  for (const std::string& s : kept) normal.push_back({s, static_cast<float>(std::log(prob[s])), kNormalPiece});
  std::stable_sort(normal.begin(), normal.end(), [](const ModelPiece& a, const ModelPiece& b) {
    return a.score != b.score ? a.score > b.score : a.piece < b.piece;
  });
  out.pieces.insert(out.pieces.end(), normal.begin(), normal.end());
  if (stats) *stats = merge_stats(models, parts, n_meta, kept);
  return serialize_model_parts(out);
}

}  // namespace lm::tokenizer
