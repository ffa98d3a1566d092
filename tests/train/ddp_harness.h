// The multi-rank harness of the data-parallel tests (ddp_test.cpp, sharded_checkpoint_test.cpp):
// launches ranks of tests/train/ddp_worker.cpp over loopback and reads what they wrote.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "model/safetensors.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/sharded_checkpoint.h"

namespace lm::train::ddp_harness {
namespace fs = std::filesystem;

inline const std::string kWorker = LM_BINARY_DIR "/tests/train/ddp_worker";


inline fs::path tmp(const std::string& name) {
  auto p = fs::temp_directory_path() / ("lm_ddp_" + std::to_string(getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p;
}

// A port the kernel reports free: bind port 0 on loopback, read the port, close. (A port drawn from
// a pid/time-seeded RNG once gave two tests that ctest ran in parallel the same port: adjacent pids
// a second apart make the same seed.) Another process could take it before TCPStore binds it;
// the kernel hands out ephemeral ports in sequence, so that does not happen between tests here.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// Runs `world` ranks of the worker concurrently; returns the first nonzero exit code. `env` adds
// worker knobs ("LM_DDP_OVERLAP=0 LM_DDP_ACCUM=2 ...", see ddp_worker.cpp).
inline int run(int world, const fs::path& dir, int steps, int stop_at, bool resume, const fs::path& losses,
        const std::string& env = "", int port = 0, const std::string& log = "") {
  if (port == 0) port = free_port();
  const std::string redirect = log.empty() ? "" : " >> " + log + " 2>&1";
  std::string cmd;
  for (int r = 0; r < world; ++r) {
    cmd += env + " RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) + " WORLD_SIZE=" +
           std::to_string(world) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " " +
           kWorker + " " + dir.string() + " " + std::to_string(steps) + " 8 " + std::to_string(stop_at) +
           " " + (resume ? "1" : "0") + " " + losses.string() + redirect + " & ";
  }
  cmd = "bash -c '" + cmd + " rc=0; for j in $(jobs -p); do wait $j || rc=$?; done; exit $rc'";
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

inline std::vector<double> read_losses(const fs::path& p) {
  std::ifstream in(p);
  std::vector<double> v;
  std::string line;
  while (std::getline(in, line)) v.push_back(std::strtod(line.c_str(), nullptr));
  return v;
}

// Pre-clip gradient norm of every step, from the metrics rank 0 writes.
inline std::vector<double> grad_norms(const fs::path& run) {
  std::ifstream in(run / "metrics.jsonl");
  std::vector<double> v;
  std::string line;
  while (std::getline(in, line)) v.push_back(lm::Json::parse(line)["grad_norm"].get<double>());
  return v;
}

inline std::vector<torch::Tensor> weights(const fs::path& run) {
  auto ck = lm::train::latest_checkpoint(run.string());
  EXPECT_TRUE(ck.ok()) << ck.status();
  auto f = lm::model::load_safetensors(*ck + "/model.safetensors");
  EXPECT_TRUE(f.ok()) << f.status();
  std::vector<torch::Tensor> out;
  for (auto& [n, t] : f->tensors) out.push_back(t);
  return out;
}

// Both runs' latest weights agree within 1% of one step's update per element (the bound of every
// comparison whose runs differ only in the order a sum runs: another number of ranks, a resume at
// another world size); returns the largest difference.
inline double expect_weights_within_a_step(const fs::path& a, const fs::path& b, const std::string& what = "") {
  const auto wa = weights(a), wb = weights(b);
  EXPECT_EQ(wa.size(), wb.size()) << what;
  const double bound = 0.01 * lm::train::TrainConfig{}.optimizer.lr;
  double worst = 0;
  for (size_t i = 0; i < std::min(wa.size(), wb.size()); ++i) {
    const double d = (wa[i] - wb[i]).abs().max().item<double>();
    worst = std::max(worst, d);
    EXPECT_LE(d, bound) << "tensor " << i << " " << what;
  }
  return worst;
}

// A run stopped at step 3 (losses in PART.a) and resumed on another layout (PART.b) against the
// unbroken run FULL: steps 1-3 exactly its losses, the later ones within 1e-5 (the rows are the same,
// their sum runs in another order), and its weights within a step's 1%.
inline void expect_resumed_as_unbroken(const fs::path& full, const fs::path& part, const std::string& what) {
  const auto f = read_losses(full.string() + ".losses");
  auto a = read_losses(part.string() + ".a"), b = read_losses(part.string() + ".b");
  a.insert(a.end(), b.begin(), b.end());
  ASSERT_EQ(a.size(), f.size()) << what;
  for (size_t i = 0; i < f.size(); ++i) {
    if (i < 3) EXPECT_EQ(a[i], f[i]) << "step " << i + 1 << " " << what;
    else EXPECT_NEAR(a[i], f[i], 1e-5) << "step " << i + 1 << " " << what;
  }
  expect_weights_within_a_step(full, part, what);
}

// Tensors of a file of the latest checkpoint, by name. "optimizer.safetensors" is the whole
// optimizer state in either format (a ZeRO-1 checkpoint's rank files assembled by its index).
inline std::map<std::string, torch::Tensor> checkpoint_tensors(const fs::path& run, const std::string& file) {
  auto ck = lm::train::latest_checkpoint(run.string());
  EXPECT_TRUE(ck.ok()) << ck.status();
  std::map<std::string, torch::Tensor> out;
  if (!ck.ok()) return out;
  absl::StatusOr<lm::model::NamedTensors> f;
  if (file == "optimizer.safetensors") {
    f = lm::train::read_optimizer_state(*ck);
  } else if (auto st = lm::model::load_safetensors(*ck + "/" + file); st.ok()) {
    f = std::move(st->tensors);
  } else {
    f = st.status();
  }
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return out;
  for (auto& [n, t] : *f) out[n] = t;
  return out;
}

}  // namespace lm::train::ddp_harness
