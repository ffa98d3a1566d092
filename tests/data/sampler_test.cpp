// Batch sampler: determinism, exact resume, rank slices, mixture weights, validation windows.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "data/sampler.h"
#include "tests/data/test_util.h"

namespace lm::data {
namespace {

using testing::iota_tokens;
using testing::TempDir;

constexpr uint32_t kBigVocab = 1u << 24;  // ids = positions, so a window is known by its first token

TEST(Permutation, IsABijectionForManySizes) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 16ull, 17ull, 100ull, 1000ull, 4097ull}) {
    for (uint64_t key : {0ull, 1ull, 0xdeadbeefull}) {
      std::vector<uint64_t> seen(n, 0);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t p = permute_index(i, n, key);
        ASSERT_LT(p, n);
        seen[p]++;
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](uint64_t c) { return c == 1; })) << n;
    }
  }
  // Different keys give different orders (not the identity).
  int moved = 0;
  for (uint64_t i = 0; i < 1000; ++i) moved += permute_index(i, 1000, 5) != permute_index(i, 1000, 6);
  EXPECT_GT(moved, 900);
}

class SamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two languages, bn in two shards; ids: bn shard0 [0, 5000), bn shard1 [100000, 103000),
    // en [200000, 204000).
    LM_ASSERT_OK(testing::write_synthetic_set(
        dir_.path(),
        {{"bn", "train", iota_tokens(5000, 0), {}},
         {"bn", "train", iota_tokens(3000, 100000), {}},
         {"en", "train", iota_tokens(4000, 200000), {}},
         {"bn", "val", iota_tokens(700, 300000), {}}},
        kBigVocab, {{"bn", 3.0}, {"en", 1.0}}));
    auto set = ShardSet::open(dir_.path());
    LM_ASSERT_OK(set.status());
    set_ = std::make_unique<ShardSet>(std::move(*set));
  }

  BatchSampler make(SamplerConfig cfg) {
    auto s = BatchSampler::create(*set_, cfg);
    EXPECT_TRUE(s.ok()) << s.status().message();
    return std::move(*s);
  }

  static std::vector<std::vector<int32_t>> draw(BatchSampler& s, int steps) {
    std::vector<std::vector<int32_t>> out(steps);
    for (auto& b : out) s.next(&b);
    return out;
  }

  TempDir dir_;
  std::unique_ptr<ShardSet> set_;
};

TEST_F(SamplerTest, BatchesAreContiguousWindowsOfTPlusOne) {
  SamplerConfig cfg;
  cfg.batch = 4;
  cfg.seq_len = 16;
  BatchSampler s = make(cfg);
  std::vector<int32_t> b;
  s.next(&b);
  ASSERT_EQ(b.size(), 4u * 17);
  for (int r = 0; r < 4; ++r) {
    const int32_t first = b[r * 17];
    EXPECT_EQ(first % 16, 0) << "window starts on the T grid";
    for (int t = 1; t < 17; ++t) EXPECT_EQ(b[r * 17 + t], first + t);
  }
}

TEST_F(SamplerTest, SameSeedSameBatchesOtherSeedOthers) {
  SamplerConfig cfg;
  cfg.batch = 3;
  cfg.seq_len = 32;
  BatchSampler a = make(cfg), b = make(cfg);
  const auto da = draw(a, 50), db = draw(b, 50);
  EXPECT_EQ(da, db);
  cfg.seed = 99;
  BatchSampler c = make(cfg);
  EXPECT_NE(draw(c, 50), da);
}

TEST_F(SamplerTest, CursorRestoreEqualsUninterruptedRun) {
  SamplerConfig cfg;
  cfg.batch = 4;
  cfg.seq_len = 64;
  BatchSampler full = make(cfg);
  // 300 steps of 4 rows cross several epochs of both languages (bn: 124 windows, en: 62).
  const auto expected = draw(full, 300);

  BatchSampler first = make(cfg);
  draw(first, 137);
  const std::string saved = first.cursor().dump();  // through text, as a checkpoint stores it

  BatchSampler resumed = make(cfg);
  LM_ASSERT_OK(resumed.restore(Json::parse(saved)));
  EXPECT_EQ(resumed.step(), 137);
  const auto rest = draw(resumed, 300 - 137);
  for (int i = 0; i < 300 - 137; ++i) ASSERT_EQ(rest[i], expected[137 + i]) << "step " << 137 + i;

  // A copy continues independently from the same point.
  BatchSampler copy = first;
  const auto from_copy = draw(copy, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(from_copy[i], expected[137 + i]);
}

TEST_F(SamplerTest, RestoreRefusesAnotherConfig) {
  SamplerConfig cfg;
  cfg.batch = 4;
  cfg.seq_len = 64;
  BatchSampler s = make(cfg);
  draw(s, 3);
  const Json cur = s.cursor();
  struct Case {
    const char* field;
    SamplerConfig cfg;
  };
  std::vector<Case> cases;
  for (const char* f : {"seed", "seq_len", "doc_aligned", "probabilities"}) {
    SamplerConfig c = cfg;
    if (std::string(f) == "seed") c.seed = 7;
    if (std::string(f) == "seq_len") c.seq_len = 32;
    if (std::string(f) == "doc_aligned") c.doc_aligned = true;
    if (std::string(f) == "probabilities") c.weights = {{"bn", 1.0}, {"en", 1.0}};
    cases.push_back({f, c});
  }
  for (const auto& c : cases) {
    BatchSampler other = make(c.cfg);
    absl::Status st = other.restore(cur);
    ASSERT_FALSE(st.ok()) << c.field;
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(std::string(c.field) + ": saved"), std::string::npos) << st.message();
  }
  BatchSampler same = make(cfg);
  EXPECT_FALSE(same.restore(Json{{"kind", "something else"}}).ok());
  LM_ASSERT_OK(same.restore(cur));
  // 3 steps of 4 rows are not a whole number of steps of 8 (2 ranks x 4): refused, naming both.
  SamplerConfig wide = cfg;
  wide.world = 2;
  absl::Status st = make(wide).restore(cur);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("12 rows consumed"), std::string::npos) << st.message();
}

// A resume on another number of ranks: the cursor counts global rows, so 2 ranks of 4 rows that
// restore 1 rank's cursor of 8-row steps take, together, exactly the rows the 1-rank run takes next.
TEST_F(SamplerTest, CursorResumesOnAnotherWorldWithTheSameRows) {
  SamplerConfig one;
  one.batch = 8;
  one.seq_len = 50;
  BatchSampler single = make(one);
  std::vector<int32_t> b;
  for (int i = 0; i < 5; ++i) single.next(&b);
  const Json cur = single.cursor();
  std::vector<std::vector<int32_t>> next_single;
  for (int i = 0; i < 20; ++i) {
    single.next(&b);
    next_single.push_back(b);
  }
  SamplerConfig two = one;
  two.batch = 4;
  two.world = 2;
  for (int rank = 0; rank < 2; ++rank) {
    two.rank = rank;
    BatchSampler r = make(two);
    LM_ASSERT_OK(r.restore(cur));
    EXPECT_EQ(r.step(), 5);
    for (int i = 0; i < 20; ++i) {
      r.next(&b);
      const std::vector<int32_t> want(next_single[i].begin() + rank * 4 * 51, next_single[i].begin() + (rank + 1) * 4 * 51);
      ASSERT_EQ(b, want) << "rank " << rank << ", step " << 6 + i;
    }
  }
  // And back: 2 ranks' cursor (5 steps of 2 x 4 rows) into micro-batches of 2 rows on one rank.
  two.rank = 0;
  BatchSampler r0 = make(two);
  for (int i = 0; i < 5; ++i) r0.next(&b);
  SamplerConfig small = one;
  small.batch = 2;
  BatchSampler s = make(small);
  LM_ASSERT_OK(s.restore(r0.cursor()));
  EXPECT_EQ(s.step(), 20);
  s.next(&b);
  EXPECT_EQ(b, std::vector<int32_t>(next_single[0].begin(), next_single[0].begin() + 2 * 51));
}

// Windows of one language, world ranks: every window exactly once per epoch, ranks disjoint.
TEST_F(SamplerTest, TwoRanksAreDisjointAndCoverAnEpoch) {
  SamplerConfig cfg;
  cfg.batch = 4;
  cfg.seq_len = 50;
  cfg.world = 2;
  cfg.weights = {{"bn", 1.0}};  // bn only: (4999/50) + (2999/50) = 99 + 59 = 158 windows
  BatchSampler r0 = make(cfg);
  cfg.rank = 1;
  BatchSampler r1 = make(cfg);
  const uint64_t n = r0.windows("bn");
  ASSERT_EQ(n, 158u);
  std::vector<int32_t> starts0, starts1;
  std::vector<int32_t> b;
  // 158 windows / 8 rows per step: 19 full steps + 6 rows of the 20th.
  for (int step = 0; step < 20; ++step) {
    r0.next(&b);
    for (int r = 0; r < 4; ++r) starts0.push_back(b[r * 51]);
    r1.next(&b);
    for (int r = 0; r < 4; ++r) starts1.push_back(b[r * 51]);
  }
  // The global order is rank 0's 4 rows then rank 1's 4 rows of each step.
  std::vector<int32_t> global;
  for (int step = 0; step < 20; ++step) {
    for (int r = 0; r < 4; ++r) global.push_back(starts0[step * 4 + r]);
    for (int r = 0; r < 4; ++r) global.push_back(starts1[step * 4 + r]);
  }
  global.resize(n);  // first epoch
  std::set<int32_t> epoch(global.begin(), global.end());
  EXPECT_EQ(epoch.size(), n) << "a window repeated inside the epoch";
  std::set<int32_t> expected;
  for (int32_t k = 0; k < 99; ++k) expected.insert(k * 50);
  for (int32_t k = 0; k < 59; ++k) expected.insert(100000 + k * 50);
  EXPECT_EQ(epoch, expected);
  std::set<int32_t> s0(starts0.begin(), starts0.begin() + 76), s1(starts1.begin(), starts1.begin() + 76);
  for (int32_t x : s0) EXPECT_EQ(s1.count(x), 0u) << "window " << x << " on both ranks";
  // And they equal the single-process stream with batch 8, split in halves.
  SamplerConfig one = cfg;
  one.rank = 0;
  one.world = 1;
  one.batch = 8;
  BatchSampler single = make(one);
  single.next(&b);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(b[r * 51], starts0[r]);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(b[(4 + r) * 51], starts1[r]);
  // Cursors of both ranks are the same global state.
  EXPECT_EQ(r0.cursor()["consumed"], r1.cursor()["consumed"]);
}

TEST_F(SamplerTest, SecondEpochIsAnotherPermutation) {
  SamplerConfig cfg;
  cfg.batch = 1;
  cfg.seq_len = 100;
  cfg.weights = {{"en", 1.0}};  // 3999 / 100 = 39 windows
  BatchSampler s = make(cfg);
  ASSERT_EQ(s.windows("en"), 39u);
  std::vector<int32_t> e1, e2, b;
  for (int i = 0; i < 39; ++i) { s.next(&b); e1.push_back(b[0]); }
  for (int i = 0; i < 39; ++i) { s.next(&b); e2.push_back(b[0]); }
  EXPECT_NE(e1, e2);
  std::sort(e1.begin(), e1.end());
  std::sort(e2.begin(), e2.end());
  EXPECT_EQ(e1, e2);
  EXPECT_DOUBLE_EQ(s.epochs("en"), 2.0);
}

// Rows per language over a long draw follow the weights: bn 3 : en 1 from the manifest.
// Tolerance 0.01 absolute: the draw is a deterministic hash, but as a binomial with N = 40000
// rows its standard deviation is sqrt(0.75 * 0.25 / 40000) = 0.0022, so 0.01 is ~4.6 sigma.
TEST_F(SamplerTest, MixtureWeightsRespectedOnALargeDraw) {
  SamplerConfig cfg;
  cfg.batch = 8;
  cfg.seq_len = 8;
  BatchSampler s = make(cfg);
  EXPECT_DOUBLE_EQ(s.probability("bn"), 0.75);
  EXPECT_DOUBLE_EQ(s.probability("en"), 0.25);
  std::vector<int32_t> b;
  int64_t bn = 0, total = 0;
  for (int step = 0; step < 5000; ++step) {
    s.next(&b);
    for (int r = 0; r < 8; ++r, ++total) bn += b[r * 9] < 200000;
  }
  const double share = static_cast<double>(bn) / total;
  EXPECT_NEAR(share, 0.75, 0.01);

  // Weights given in the config override the manifest's.
  cfg.weights = {{"bn", 1.0}, {"en", 4.0}};
  BatchSampler t = make(cfg);
  bn = 0;
  total = 0;
  for (int step = 0; step < 5000; ++step) {
    t.next(&b);
    for (int r = 0; r < 8; ++r, ++total) bn += b[r * 9] < 200000;
  }
  EXPECT_NEAR(static_cast<double>(bn) / total, 0.2, 0.01);
}

// Issue #21.5: weight is a source's share of the mixture, within a language too. bn has two
// sources, "big" (20000 tokens, weight 1) and "small" (4000 tokens, weight 3); en one (weight 4).
// Per-language weights (the old meaning) drew bn's windows evenly, big 5x as often as small.
class SourceWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<SourceReport> sources(3);
    sources[0].id = "big", sources[0].lang = "bn", sources[0].weight = 1;
    sources[1].id = "small", sources[1].lang = "bn", sources[1].weight = 3;
    sources[2].id = "wiki", sources[2].lang = "en", sources[2].weight = 4;
    LM_ASSERT_OK(testing::write_synthetic_set(dir_.path(),
                                              {{"bn", "train", iota_tokens(20000, 0), {}, "big"},
                                               {"bn", "train", iota_tokens(4000, 100000), {}, "small"},
                                               {"en", "train", iota_tokens(8000, 200000), {}, "wiki"}},
                                              kBigVocab, {{"bn", 4.0}, {"en", 4.0}}, sources));
    auto set = ShardSet::open(dir_.path());
    LM_ASSERT_OK(set.status());
    set_ = std::make_unique<ShardSet>(std::move(*set));
  }
  // Share of rows from big, small and wiki over `steps` steps of 16 rows.
  static std::vector<double> shares(BatchSampler& s, int steps) {
    std::vector<double> n(3, 0);
    std::vector<int32_t> b;
    for (int step = 0; step < steps; ++step) {
      s.next(&b);
      for (int r = 0; r < 16; ++r) n[b[r * 17] / 100000] += 1.0 / (16.0 * steps);
    }
    return n;
  }
  TempDir dir_;
  std::unique_ptr<ShardSet> set_;
};

// Tolerance 0.015 absolute: as a binomial over N = 16000 rows the largest standard deviation is
// sqrt(0.5 * 0.5 / 16000) = 0.004, so 0.015 is ~3.8 sigma; the old meaning is off by 0.29.
TEST_F(SourceWeights, RowsFollowEachSourcesWeightWithinALanguage) {
  SamplerConfig cfg;
  cfg.batch = 16;
  cfg.seq_len = 16;
  auto s = BatchSampler::create(*set_, cfg);
  LM_ASSERT_OK(s.status());
  const std::vector<double> got = shares(*s, 1000);
  EXPECT_NEAR(got[0], 0.125, 0.015) << "bn/big";
  EXPECT_NEAR(got[1], 0.375, 0.015) << "bn/small";
  EXPECT_NEAR(got[2], 0.5, 0.015) << "en/wiki";
  EXPECT_DOUBLE_EQ(s->probability("bn"), 0.5);
  ASSERT_EQ(s->streams().size(), 3u);
  EXPECT_EQ(s->streams()[1].name, "bn/small");
  // epochs() of a language: its windows drawn (8000 of 16000 rows) over its windows (1249 + 249).
  EXPECT_NEAR(s->epochs("bn"), 8000.0 / 1498.0, 0.3);

  // A per-language weight in the config sets the language's total, shared by its sources' weights.
  cfg.weights = {{"bn", 1.0}, {"en", 1.0}};
  auto t = BatchSampler::create(*set_, cfg);
  LM_ASSERT_OK(t.status());
  const std::vector<double> over = shares(*t, 1000);
  EXPECT_NEAR(over[0], 0.125, 0.015);
  EXPECT_NEAR(over[1], 0.375, 0.015);
}

TEST_F(SourceWeights, CursorOfSourceStreamsResumesExactly) {
  SamplerConfig cfg;
  cfg.batch = 4;
  cfg.seq_len = 16;
  auto a = BatchSampler::create(*set_, cfg);
  auto b = BatchSampler::create(*set_, cfg);
  LM_ASSERT_OK(a.status());
  LM_ASSERT_OK(b.status());
  std::vector<int32_t> x, y;
  for (int i = 0; i < 700; ++i) a->next(&x);  // past an epoch of small (249 windows at 0.375)
  EXPECT_TRUE(a->cursor().at("consumed").contains("bn/small")) << a->cursor().dump();
  LM_ASSERT_OK(b->restore(a->cursor()));
  for (int i = 0; i < 20; ++i) {
    a->next(&x);
    b->next(&y);
    ASSERT_EQ(x, y) << "step " << i;
  }
}

// Passes over the data for a token budget (Muennighoff et al. 2023: up to ~4 are about as good as
// fresh text): per language and per source, and a warning above 4.
TEST(Passes, ComputedPerLanguageAndSourceAndWarnedAboveFour) {
  const std::vector<MixturePart> parts = {{"bn", "a", 0.4, 1000}, {"bn", "b", 0.4, 90}, {"en", "wiki", 0.2, 500}};
  const std::vector<Passes> rows = compute_passes(parts, 1000);
  ASSERT_EQ(rows.size(), 5u);  // bn, en, then the sources
  EXPECT_EQ(rows[0].lang, "bn");
  EXPECT_DOUBLE_EQ(rows[0].share, 0.8);
  EXPECT_EQ(rows[0].tokens, 1090u);
  EXPECT_DOUBLE_EQ(rows[0].passes, 800.0 / 1090.0);
  EXPECT_EQ(rows[3].source, "b");
  EXPECT_DOUBLE_EQ(rows[3].passes, 400.0 / 90.0);
  EXPECT_DOUBLE_EQ(rows[4].passes, 200.0 / 500.0);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(warn_passes(rows, 1000, "test"), 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("test: 1.0k tokens repeat the same text more than 4 times: source 'bn/b' 4.4 passes over 90 "
                     "tokens (past"), std::string::npos) << err;
  EXPECT_NE(format_passes(rows, 1000, "test").find("4.44x  > 4"), std::string::npos) << format_passes(rows, 1000, "test");
}

TEST_F(SamplerTest, BadConfigsAreClearErrors) {
  SamplerConfig cfg;
  cfg.weights = {{"fr", 1.0}};
  auto s = BatchSampler::create(*set_, cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("weights.fr: language 'fr' has no training shards"), std::string::npos)
      << s.status().message();
  cfg = SamplerConfig();
  cfg.seq_len = 4500;  // a bn shard has 5000 tokens, en only 4000
  s = BatchSampler::create(*set_, cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("language 'en' has 4000 training tokens"), std::string::npos)
      << s.status().message();
  cfg = SamplerConfig();
  cfg.rank = 2;
  cfg.world = 2;
  EXPECT_FALSE(BatchSampler::create(*set_, cfg).ok());
}

TEST(DocAligned, WindowsStartAtDocumentStarts) {
  TempDir dir;
  // Documents of lengths 5, 30, 3, 100, 2, 60 (T = 16).
  std::vector<uint64_t> offs = {0};
  for (uint64_t len : {5, 30, 3, 100, 2, 60}) offs.push_back(offs.back() + len);
  LM_ASSERT_OK(testing::write_synthetic_set(dir.path(), {{"bn", "train", iota_tokens(offs.back()), offs}},
                                            kBigVocab));
  auto set = ShardSet::open(dir.path());
  LM_ASSERT_OK(set.status());
  SamplerConfig cfg;
  cfg.batch = 1;
  cfg.seq_len = 16;
  cfg.doc_aligned = true;
  auto s = BatchSampler::create(*set, cfg);
  LM_ASSERT_OK(s.status());
  const uint64_t n = s->windows("bn");
  std::set<int32_t> starts;
  std::vector<int32_t> b;
  for (uint64_t i = 0; i < n; ++i) {
    s->next(&b);
    starts.insert(b[0]);
  }
  // Walk (next start = last document start in (p, p+T], else p+T): 0 -> 5; 5 -> 21 (no start in
  // (5, 21]); 21 -> 35; 35 -> 38; 38 -> 54, 70, 86, 102, 118, 134 (inside the 100-token document);
  // 134 -> 140 (the last start <= 150, so the 2-token document at 138 is inside 134's window);
  // 140 -> 156 -> 172; 188 + 17 > 200 ends it.
  const std::set<int32_t> expected = {0, 5, 21, 35, 38, 54, 70, 86, 102, 118, 134, 140, 156, 172};
  EXPECT_EQ(starts, expected);
}

TEST_F(SamplerTest, ValidationWindowsAreInOrderAndBounded) {
  auto w = validation_windows(*set_, "bn", 64, 0);
  LM_ASSERT_OK(w.status());
  ASSERT_EQ(w->size(), 10u);  // (700 - 65) / 64 + 1 = 10
  for (size_t i = 0; i < w->size(); ++i) {
    ASSERT_EQ((*w)[i].size(), 65u);
    EXPECT_EQ((*w)[i][0], 300000 + static_cast<int32_t>(i) * 64);
    EXPECT_EQ((*w)[i][64], 300000 + static_cast<int32_t>(i) * 64 + 64);
  }
  auto limited = validation_windows(*set_, "bn", 64, 3, 32);
  LM_ASSERT_OK(limited.status());
  ASSERT_EQ(limited->size(), 3u);
  EXPECT_EQ((*limited)[2][0], 300064);
  auto missing = validation_windows(*set_, "en", 64, 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no validation shards for language 'en'"), std::string::npos);
  auto too_long = validation_windows(*set_, "bn", 1000, 0);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace lm::data
