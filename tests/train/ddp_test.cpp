// Data parallel on c10d/Gloo over loopback: 2 processes with global batch B must give the same
// losses and weights as 1 process with batch B, and a 2-process run resumes exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "model/safetensors.h"
#include "train/checkpoint.h"

namespace {
namespace fs = std::filesystem;

const std::string kWorker = LM_BINARY_DIR "/tests/train/ddp_worker";

fs::path tmp(const std::string& name) {
  auto p = fs::temp_directory_path() / ("lm_ddp_" + std::to_string(getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p;
}

int free_port() {
  std::mt19937 rng(static_cast<unsigned>(getpid()) ^ static_cast<unsigned>(time(nullptr)));
  return 20000 + static_cast<int>(rng() % 20000);
}

// Runs `world` ranks of the worker concurrently; returns the first nonzero exit code.
int run(int world, const fs::path& dir, int steps, int stop_at, bool resume, const fs::path& losses) {
  const int port = free_port();
  std::string cmd;
  for (int r = 0; r < world; ++r) {
    cmd += "RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) + " WORLD_SIZE=" +
           std::to_string(world) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " " +
           kWorker + " " + dir.string() + " " + std::to_string(steps) + " 8 " + std::to_string(stop_at) +
           " " + (resume ? "1" : "0") + " " + losses.string() + " & ";
  }
  cmd = "bash -c '" + cmd + " rc=0; for j in $(jobs -p); do wait $j || rc=$?; done; exit $rc'";
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

std::vector<double> read_losses(const fs::path& p) {
  std::ifstream in(p);
  std::vector<double> v;
  std::string line;
  while (std::getline(in, line)) v.push_back(std::strtod(line.c_str(), nullptr));
  return v;
}

std::vector<torch::Tensor> weights(const fs::path& run) {
  auto ck = lm::train::latest_checkpoint(run.string());
  EXPECT_TRUE(ck.ok()) << ck.status();
  auto f = lm::model::load_safetensors(*ck + "/model.safetensors");
  EXPECT_TRUE(f.ok()) << f.status();
  std::vector<torch::Tensor> out;
  for (auto& [n, t] : f->tensors) out.push_back(t);
  return out;
}

TEST(DataParallel, TwoRanksEqualOneRankSameGlobalBatch) {
  auto one = tmp("one"), two = tmp("two");
  ASSERT_EQ(run(1, one, 6, -1, false, one.string() + ".losses"), 0);
  ASSERT_EQ(run(2, two, 6, -1, false, two.string() + ".losses"), 0);
  auto l1 = read_losses(one.string() + ".losses"), l2 = read_losses(two.string() + ".losses");
  ASSERT_EQ(l1.size(), 6u);
  ASSERT_EQ(l2.size(), 6u);
  // fp32: the 2-rank mean averages two 4-row means instead of one 8-row mean, so sums run in
  // another order; over 6 Adam steps that stays near 1e-6 relative. 1e-5 absolute on losses of
  // ~6 nats and 1e-4 relative on weights catch any missing average or wrong data slice (which
  // move the loss by >1e-2).
  for (size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l1[i], l2[i], 1e-5) << "step " << i + 1;
  auto w1 = weights(one), w2 = weights(two);
  ASSERT_EQ(w1.size(), w2.size());
  for (size_t i = 0; i < w1.size(); ++i) EXPECT_TRUE(torch::allclose(w1[i], w2[i], 1e-4, 1e-5)) << i;
}

TEST(DataParallel, TwoRankRunResumesExactly) {
  auto full = tmp("full"), part = tmp("part");
  ASSERT_EQ(run(2, full, 6, -1, false, full.string() + ".losses"), 0);
  ASSERT_EQ(run(2, part, 6, 3, false, part.string() + ".a"), 0);
  ASSERT_EQ(run(2, part, 6, -1, true, part.string() + ".b"), 0);
  auto a = read_losses(part.string() + ".a"), b = read_losses(part.string() + ".b");
  a.insert(a.end(), b.begin(), b.end());
  auto f = read_losses(full.string() + ".losses");
  ASSERT_EQ(a.size(), f.size());
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(a[i], f[i]) << "step " << i + 1;
  auto wf = weights(full), wp = weights(part);
  for (size_t i = 0; i < wf.size(); ++i) EXPECT_TRUE(torch::equal(wf[i], wp[i])) << i;
  // A resume with another world size is refused with a clear message.
  EXPECT_NE(run(1, part, 8, -1, true, part.string() + ".c"), 0);
}

}  // namespace
