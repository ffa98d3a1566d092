#include "core/checkpoint_manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/config.h"
#include "core/file.h"

namespace lm {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "lmforge-checkpoint-manifest/1";

using FileSum = FileChecksum;

// Size and CRC-32 of a file, read (not mapped: a file cut short meanwhile is an error, not SIGBUS)
// in 4 MiB pieces.
absl::StatusOr<FileSum> sum_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("open", path);
  std::vector<char> buf(4 << 20);
  FileSum s;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status st = errno_status("read", path);
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    s.crc = crc32(buf.data(), static_cast<size_t>(n), s.crc);
    s.bytes += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return s;
}

std::string hex32(uint32_t v) { return absl::StrFormat("%08x", v); }

bool is_temp(const std::string& name) { return name.find(".tmp") != std::string::npos; }

}  // namespace

absl::Status write_checkpoint_manifest(const std::string& dir, const std::map<std::string, FileChecksum>& known) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file() && n != kManifestName && !is_temp(n)) names.push_back(n);
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  std::sort(names.begin(), names.end());
  Json files = Json::object();
  for (const auto& n : names) {
    FileSum s;
    if (auto k = known.find(n); k != known.end()) {
      s = k->second;
    } else {
      LM_ASSIGN_OR_RETURN(s, sum_file((fs::path(dir) / n).string()));
    }
    files[n] = {{"bytes", s.bytes}, {"crc32", hex32(s.crc)}};
  }
  const Json m = {{"format", kFormat}, {"algorithm", "crc32"}, {"files", files}};
  return write_json_file((fs::path(dir) / kManifestName).string(), m);
}

absl::Status verify_checkpoint(const std::string& dir, const std::vector<std::string>& files, bool* unverified) {
  const std::string mpath = (fs::path(dir) / kManifestName).string();
  if (unverified != nullptr) *unverified = false;
  if (!fs::exists(mpath)) {
    for (const auto& f : files)
      if (!fs::exists(fs::path(dir) / f))
        return absl::DataLossError(absl::StrCat(dir, ": checkpoint is missing ", f, " (incomplete or damaged)"));
    if (unverified != nullptr) *unverified = true;
    return absl::OkStatus();
  }
  auto m = read_json_file(mpath);
  if (!m.ok()) return absl::DataLossError(std::string(m.status().message()));
  if (!m->is_object() || m->value("format", "") != kFormat || !(*m)["files"].is_object())
    return absl::DataLossError(absl::StrCat(mpath, ": not a checkpoint manifest (expected \"format\": \"", kFormat,
                                            "\" and a \"files\" object)"));
  const Json& listed = (*m)["files"];
  std::vector<std::string> check = files;
  if (check.empty())
    for (auto it = listed.begin(); it != listed.end(); ++it) check.push_back(it.key());
  for (const auto& f : check) {
    const std::string path = (fs::path(dir) / f).string();
    if (!listed.contains(f) || !listed[f].is_object())
      return absl::DataLossError(absl::StrCat(mpath, ": lists no ", f, " (the checkpoint is damaged)"));
    if (!fs::exists(path))
      return absl::DataLossError(absl::StrCat(dir, ": checkpoint is missing ", f, " (incomplete or damaged)"));
    LM_ASSIGN_OR_RETURN(FileSum s, sum_file(path));
    const uint64_t want_bytes = listed[f].value("bytes", uint64_t{0});
    const std::string want_crc = listed[f].value("crc32", "");
    if (s.bytes != want_bytes)
      return absl::DataLossError(absl::StrCat(path, ": ", s.bytes, " bytes, but ", kManifestName, " records ", want_bytes,
                                              " (truncated or changed after it was written)"));
    if (hex32(s.crc) != want_crc)
      return absl::DataLossError(absl::StrCat(path, ": checksum mismatch: crc32 ", hex32(s.crc), " but ", kManifestName,
                                              " records ", want_crc,
                                              " (the file changed after it was written: a bad disk or copy, or an edit)"));
  }
  return absl::OkStatus();
}

}  // namespace lm
