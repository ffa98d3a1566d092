#include "train/rank_agreement.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "core/checkpoint_manifest.h"
#include "core/file.h"
#include "core/log.h"
#include "train/distributed.h"

namespace lm::train {
namespace fs = std::filesystem;
namespace {

// A shared filesystem may show a new file to another client a moment late (NFS attribute caches);
// a rank looks for this long before it says it cannot see the file. The name is new on every
// start, so no cached "no such file" answer for it can exist.
constexpr auto kVisibleWithin = std::chrono::seconds(10);

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

// The token rank 0 drew, on every rank: a sum where the others add 0. Two 32-bit halves as
// doubles keep it exact.
uint64_t shared_token(Comm& comm) {
  uint64_t token = 0;
  if (comm.rank() == 0) {
    std::random_device rd;
    token = (uint64_t(rd()) << 32) | rd();
  }
  const double lo = comm.sum(static_cast<double>(token & 0xffffffffULL));
  const double hi = comm.sum(static_cast<double>(token >> 32));
  return (uint64_t(hi) << 32) | uint64_t(lo);
}

bool sees(const std::string& path, const std::string& want) {
  const auto until = std::chrono::steady_clock::now() + kVisibleWithin;
  for (;;) {
    auto got = read_file(path);
    if (got.ok() && *got == want) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

absl::Status check_shared_run_folder(Comm& comm, const std::string& dir) {
  const uint64_t token = shared_token(comm);
  const std::string name = absl::StrFormat(".rank-check-%016x", token);
  const std::string path = (fs::path(dir) / name).string();
  const std::string content = absl::StrFormat("%016x written by rank 0 on %s\n", token, host_name());
  absl::Status wrote = absl::OkStatus();
  if (comm.rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    wrote = write_file_atomic(path, content);
  }
  // Every rank learns whether rank 0 could write before anyone looks (a failed write is rank 0's error).
  if (comm.max(wrote.ok() ? 0.0 : 1.0) > 0) {
    if (!wrote.ok()) return wrote;
    return absl::FailedPreconditionError(absl::StrFormat("rank %d: rank 0 could not write into --out %s", comm.rank(), dir));
  }
  const bool ok = comm.rank() == 0 || sees(path, content);
  const double missing = comm.sum(ok ? 0.0 : 1.0);
  const int one = static_cast<int>(comm.max(ok ? -1.0 : static_cast<double>(comm.rank())));
  comm.barrier();  // everyone has looked
  if (comm.rank() == 0) fs::remove(path);
  if (missing == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "--out %s is not one folder shared by every rank: %d of %d ranks (rank %d among them%s) do not see the file "
      "rank 0 (on %s) wrote there. Only rank 0 writes checkpoints and every rank resumes from this folder, so a rank "
      "with its own copy would restart from step 0 while rank 0 resumes. Give every node the same folder (a shared "
      "filesystem mounted at the same path, e.g. NFS or Lustre), then start again",
      dir, static_cast<int>(missing), comm.world(), one,
      one == comm.rank() ? absl::StrCat(", this one, on ", host_name()) : "", comm.rank() == 0 ? host_name() : "its host"));
}

absl::Status check_same_resume(Comm& comm, int64_t step, const std::string& checkpoint_id) {
  const std::string mine = absl::StrCat("step ", step, checkpoint_id.empty() ? " (no checkpoint)" : " checkpoint " + checkpoint_id);
  absl::Status same = comm.check_same("resume point", mine);
  if (same.ok()) return same;
  return absl::FailedPreconditionError(absl::StrCat(
      same.message(), "; this rank restored ", mine,
      ". Every rank must restore the same checkpoint from one shared --out: check that no node has a copy of its own"));
}

std::string checkpoint_identity(const std::string& dir) {
  for (const char* f : {kManifestName, "trainer.json"}) {
    auto text = read_file((fs::path(dir) / f).string());
    if (text.ok()) return absl::StrFormat("%s crc32 %08x", f, crc32(text->data(), text->size()));
  }
  return "";
}

}  // namespace lm::train
