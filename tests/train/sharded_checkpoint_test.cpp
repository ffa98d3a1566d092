// Issue 39 item 3: checkpoints that reshard. Under ZeRO-1 each rank writes its part of the AdamW
// moments (optimizer.rank-R-of-W.safetensors) and rank 0 an index; a resume at another world size
// reads exactly its elements from the old ranks' files (train/sharded_checkpoint.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "core/checkpoint_manifest.h"
#include "core/run_folder.h"
#include "model/config.h"
#include "model/transformer.h"
#include "tests/train/ddp_harness.h"
#include "train/config.h"
#include "train/optimizer_shards.h"
#include "train/resume_point.h"
#include "train/sharded_checkpoint.h"

namespace {
namespace fs = std::filesystem;
using namespace lm::train::ddp_harness;
using lm::RunFolder;

const std::string kZero = "LM_DDP_ZERO=1 LM_DDP_BUCKET_MB=0.05 ";

// Where each old rank's part of each parameter begins, from the checkpoint's index.
std::map<std::string, std::set<int64_t>> old_begins(const std::string& ckpt) {
  auto index = lm::read_json_file(ckpt + "/" + lm::train::kOptimizerIndex);
  EXPECT_TRUE(index.ok()) << index.status();
  std::map<std::string, std::set<int64_t>> out;
  for (const auto& p : (*index)["params"])
    for (const auto& q : p["parts"]) out[p["name"].get<std::string>()].insert(q["begin"].get<int64_t>());
  return out;
}

// Loads checkpoint `ckpt` into rank `rank` of `world` (ZeRO-1 parts as the trainer cuts them; one
// process: whole moments) and checks every element against `ref`, the whole moments. Returns how
// many of the new parts straddle an old rank's cut.
int load_and_compare(const std::string& ckpt, int rank, int world, std::map<std::string, torch::Tensor>& ref) {
  lm::train::TrainConfig tc;
  lm::model::Transformer model(*lm::model::preset("tiny"), tc.seed);
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::vector<torch::Tensor> plist;
  for (const auto& p : model->named_parameters()) {
    params.emplace_back(p.key(), p.value());
    plist.push_back(p.value());
  }
  std::unique_ptr<lm::train::OptimizerShards> shards;
  if (world > 1) shards = std::make_unique<lm::train::OptimizerShards>(plist, rank, world, int64_t{52428});  // 0.05 MiB
  lm::train::AdamW optim(params, tc, shards ? &shards->parts() : nullptr);
  const absl::Status st = lm::train::load_optimizer(ckpt, optim);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(optim.steps_taken(), 3);
  const auto begins = old_begins(ckpt);
  int straddles = 0;
  for (const auto& p : optim.moment_parts()) {
    for (const auto& [m, got] : {std::pair{".exp_avg", p.exp_avg}, std::pair{".exp_avg_sq", p.exp_avg_sq}}) {
      const auto want = ref.at(p.name + m).reshape({-1}).narrow(0, p.begin, p.len);
      EXPECT_TRUE(torch::equal(got.reshape({-1}), want)) << p.name << m << " [" << p.begin << ", +" << p.len << ") on rank "
                                                         << rank << " of " << world;
    }
    const auto& b = begins.at(p.name);
    auto it = b.upper_bound(p.begin);
    if (it != b.end() && *it < p.begin + p.len) ++straddles;
  }
  return straddles;
}

}  // namespace

// A 2-rank ZeRO-1 checkpoint holds one file per rank (about half the moments' bytes each), the
// index, and no whole optimizer.safetensors; the manifest covers the rank files. Loaded at 3
// ranks (parts straddling the old cut) and on 1 process, every moment element equals data
// parallel's whole moments of the same run (bit-identical without clipping: ZeroOne's first test).
TEST(ShardedCheckpoint, EachRankWritesItsPartAndAnyWorldSizeLoadsItBitForBit) {
  auto zero = tmp("sc-zero"), ddp = tmp("sc-ddp");
  ASSERT_EQ(run(2, zero, 3, -1, false, zero.string() + ".l", kZero + "LM_DDP_CLIP=0"), 0);
  ASSERT_EQ(run(2, ddp, 3, -1, false, ddp.string() + ".l", "LM_DDP_BUCKET_MB=0.05 LM_DDP_CLIP=0"), 0);
  const std::string ck = RunFolder(zero.string()).checkpoint(3), whole = RunFolder(ddp.string()).checkpoint(3);
  EXPECT_FALSE(fs::exists(ck + "/optimizer.safetensors")) << "the moments were gathered into one file";
  EXPECT_TRUE(fs::exists(ck + "/" + lm::train::kOptimizerIndex));
  EXPECT_FALSE(fs::exists(ck + ".parts")) << "the staging folder stays behind";
  const double whole_bytes = static_cast<double>(fs::file_size(whole + "/optimizer.safetensors"));
  for (int r = 0; r < 2; ++r) {
    const std::string f = lm::train::optimizer_rank_file(r, 2);
    ASSERT_TRUE(fs::exists(ck + "/" + f)) << f;
    const double bytes = static_cast<double>(fs::file_size(ck + "/" + f));
    EXPECT_NEAR(bytes / whole_bytes, 0.5, 0.03) << f << ": " << bytes << " of " << whole_bytes;
    std::printf("%s: %.0f bytes (whole optimizer.safetensors: %.0f)\n", f.c_str(), bytes, whole_bytes);
    const absl::Status st = lm::verify_checkpoint(ck, {f, lm::train::kOptimizerIndex});
    EXPECT_TRUE(st.ok()) << st;
  }
  auto ref_file = lm::model::load_safetensors(whole + "/optimizer.safetensors");
  ASSERT_TRUE(ref_file.ok()) << ref_file.status();
  std::map<std::string, torch::Tensor> ref(ref_file->tensors.begin(), ref_file->tensors.end());
  int straddles = 0;
  for (int r = 0; r < 3; ++r) straddles += load_and_compare(ck, r, 3, ref);
  EXPECT_GT(straddles, 0) << "no part at 3 ranks reads from both old ranks: the test would not see the cut";
  load_and_compare(ck, 0, 1, ref);
  // And the assembled state (what a plain data-parallel resume loads) is data parallel's file.
  auto assembled = lm::train::read_optimizer_state(ck);
  ASSERT_TRUE(assembled.ok()) << assembled.status();
  ASSERT_EQ(assembled->size(), ref.size());
  for (const auto& [n, t] : *assembled) EXPECT_TRUE(torch::equal(t, ref.at(n))) << n;
}

// A ZeRO-1 run stopped at step 3 on 2 ranks goes on as ZeRO-1 on 3 ranks, and on 1 process:
// the rows are the unbroken run's (global batch 12), so it ends where that one does up to fp32
// summation order (the bounds of DataParallel.ResumeOnAnotherNumberOfRanksSeesTheSameRows).
TEST(ShardedCheckpoint, ZeroOneRunResumesOnThreeRanksAndOnOne) {
  const std::string zero12 = kZero + "LM_DDP_GLOBAL_BATCH=12";
  auto full = tmp("sc-full");
  ASSERT_EQ(run(2, full, 6, -1, false, full.string() + ".losses", zero12), 0);
  const auto f = read_losses(full.string() + ".losses");
  ASSERT_EQ(f.size(), 6u);
  for (const int world : {3, 1}) {
    auto part = tmp("sc-part-" + std::to_string(world));
    ASSERT_EQ(run(2, part, 6, 3, false, part.string() + ".a", zero12), 0);
    ASSERT_EQ(run(world, part, 6, -1, true, part.string() + ".b", world > 1 ? zero12 : "LM_DDP_GLOBAL_BATCH=12"), 0)
        << "resumed on " << world;
    expect_resumed_as_unbroken(full, part, "on " + std::to_string(world));
  }
}

// The commit protocol. A kill after the ranks wrote step 6's files (step-6.parts), or after rank
// 0's writer moved them into its temp folder (step-6.tmp.PID), leaves `latest` at step 3, which a
// resume chooses; the leftovers are removed. A rank whose file cannot be written stops every rank,
// naming the file, and step 6 is not committed.
TEST(ShardedCheckpoint, UncommittedPartsAreNeverResumedAndAFailedRankStopsAll) {
  auto part = tmp("sc-kill"), own = tmp("sc-kill-own");
  ASSERT_EQ(run(2, part, 6, 3, false, part.string() + ".a", kZero), 0);
  const RunFolder rf(part.string());
  const fs::path root = rf.checkpoints(), step3 = rf.checkpoint(3);
  const fs::path parts = root / "step-00000006.parts", tmp6 = root / "step-00000006.tmp.99999";
  fs::create_directories(parts);
  fs::copy(step3, tmp6, fs::copy_options::recursive);
  fs::remove(tmp6 / "manifest.json");
  for (int r = 0; r < 2; ++r)
    fs::copy_file(step3 / lm::train::optimizer_rank_file(r, 2), parts / lm::train::optimizer_rank_file(r, 2));
  auto latest = lm::train::latest_checkpoint(part.string());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(fs::path(*latest).filename(), "step-00000003");
  auto point = lm::train::choose_resume_point(part.string());
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->step, 3);
  // Rank 1 cannot write its file: in its own copy of the folder, the file's name is a folder.
  fs::copy(part, own, fs::copy_options::recursive);
  const fs::path blocked = own / "checkpoints" / "step-00000006.parts" / lm::train::optimizer_rank_file(1, 2);
  fs::remove(blocked);
  fs::create_directories(blocked);
  const std::string log = part.string() + ".log";
  EXPECT_NE(run(2, part, 6, -1, true, part.string() + ".b", kZero + "LM_DDP_RANK1_DIR=" + own.string(), 0, log), 0);
  std::ifstream in(log);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(said.find("checkpoint step-00000006 not written: rank 1 could not write"), std::string::npos) << said;
  EXPECT_NE(said.find(lm::train::optimizer_rank_file(1, 2)), std::string::npos) << said;
  EXPECT_FALSE(fs::exists(rf.checkpoint(6))) << "committed without rank 1's file";
  latest = lm::train::latest_checkpoint(part.string());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(fs::path(*latest).filename(), "step-00000003");
  // What the failed attempt left (rank 0's file in step-6.parts) is removed when the next start
  // begins, before any rank writes (here a resume that stops at step 4 and never reaches step 6).
  ASSERT_TRUE(fs::exists(parts));
  ASSERT_EQ(run(2, part, 6, 4, true, part.string() + ".c", kZero), 0);
  EXPECT_FALSE(fs::exists(parts)) << "a start left the staging folder of an uncommitted step";
  // The resume (every rank writing) commits step 6 and leaves no staging or temp folder.
  ASSERT_EQ(run(2, part, 6, -1, true, part.string() + ".d", kZero), 0);
  latest = lm::train::latest_checkpoint(part.string());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(fs::path(*latest).filename(), "step-00000006");
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_TRUE(e.path().filename().string().rfind("step-", 0) != 0 || lm::RunFolder::parse_step_name(e.path().filename().string()).ok())
        << "left behind: " << e.path();
}
