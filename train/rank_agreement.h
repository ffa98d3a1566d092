// What every rank of a data-parallel run must agree on before it trains (issue 39): one run folder
// and one resume point. Only rank 0 writes checkpoints and every rank restores from the folder it
// was given, so a node whose --out was not the shared folder used to resume from nothing: it
// restarted at step 0 with its initial weights while rank 0 went on from step N, and the averaged
// gradients mixed the two silently (measured with two torchrun agents, each with its own --out).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace lm::train {

class Comm;

// Proves that every rank sees the same run folder `dir`: rank 0 writes a file with a fresh random
// token into it, every rank reads it back. Any rank that does not see it (another machine's local
// disk, another path) fails every rank with FailedPrecondition naming how many ranks, one of them
// and its host, and the fix (a shared filesystem mounted at the same path on every node). Rank 0
// creates `dir` when missing and removes the file afterwards. Collective: every rank must call it.
absl::Status check_shared_run_folder(Comm& comm, const std::string& dir);

// Every rank restored the same checkpoint (or none): `step` and `checkpoint_id` (e.g. the
// checkpoint's manifest checksum; "" for a start from step 0) must be equal on every rank, or
// every rank fails with FailedPrecondition naming this rank's view. Collective.
absl::Status check_same_resume(Comm& comm, int64_t step, const std::string& checkpoint_id);

// An identity for checkpoint folder `dir` that every rank can compute: the CRC-32 of its
// manifest.json (which lists every file's size and CRC), or of trainer.json for a checkpoint
// written before manifests existed. "" when neither can be read.
std::string checkpoint_identity(const std::string& dir);

}  // namespace lm::train
