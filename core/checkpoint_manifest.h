// The checksums of a checkpoint (issue 40): one flipped bit in model.safetensors loaded silently
// and the run went on with other weights; an edited trainer.json (step, data cursor) that was
// still valid JSON was accepted. Every checkpoint folder now holds manifest.json, written last
// inside step-N.tmp/ before the rename:
//   {"format": "lmforge-checkpoint-manifest/1", "algorithm": "crc32",
//    "files": {"model.safetensors": {"bytes": 123, "crc32": "1a2b3c4d"}, ...}}
// CRC-32 is zlib's (core/file.h, the shards' checksum too): it catches every burst error up to 32
// bits and any random damage with probability 1 - 2^-32; it is no defence against someone who
// edits a file and its manifest together. Verified on resume (each file), and by lmeval and
// export (the files they read).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace lm {

inline constexpr const char* kManifestName = "manifest.json";

struct FileChecksum {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// Records the size and CRC-32 of every regular file in `dir` (not the manifest, not temp files)
// in `dir`/manifest.json (written atomically). Files in `known` take the sums given there (taken
// by the process that wrote them: the ranks' optimizer files), unread.
absl::Status write_checkpoint_manifest(const std::string& dir, const std::map<std::string, FileChecksum>& known = {});

// Checks `files` of checkpoint folder `dir` (every file the manifest lists when empty) against
// its manifest: each is there, of the recorded size and CRC. DataLoss naming the file with both
// values. A folder without manifest.json (written before checksums existed) is OK when the files
// are there, with *unverified set (the caller says so); a manifest that does not parse is DataLoss.
absl::Status verify_checkpoint(const std::string& dir, const std::vector<std::string>& files = {},
                               bool* unverified = nullptr);

}  // namespace lm
