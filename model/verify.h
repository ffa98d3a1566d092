// Verification core: the checks that make silent failures loud. They run in CI, in
// `lmtrain check`, and at the start of every `lmtrain fit`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace lm::model {

struct GradFlowReport {
  int checked = 0;
  std::vector<std::string> missing;    // no gradient at all (detached, unused)
  std::vector<std::string> zero;       // gradient exactly zero everywhere
  std::vector<std::string> nonfinite;  // NaN or Inf in the gradient
  double loss = 0;
  bool ok() const { return missing.empty() && zero.empty() && nonfinite.empty(); }
  std::string summary() const;
};

// One forward/backward of `loss_fn` on a random batch [batch, seq+1]; every parameter that
// requires grad must receive a finite gradient with at least one nonzero entry. Gradients
// are cleared before and after, so the model is left as it was.
GradFlowReport check_gradient_flow(Transformer& model, int64_t batch, int64_t seq, uint64_t seed);

struct EquivalenceReport {
  // Relative errors, max |fused - reference| / max |reference|, as the fast-path registry measures:
  // a bf16 gradient of magnitude ~1 carries an absolute error of ~1e-2 (seen on an H200: flash and
  // cuDNN at 3.1e-2 absolute, 7.9e-3 relative), so an absolute bound fails correct kernels.
  double out_err = 0;   // forward output
  double grad_err = 0;  // dL/dq, dL/dk, dL/dv (the largest of the three)
  double tolerance = 0;
  bool ok() const { return out_err <= tolerance && grad_err <= tolerance; }
  std::string summary() const;
};

// Tolerance for comparing attention outputs of unit-scale inputs: fp32 accumulates rounding
// of ~1e-6 per op over D-long dot products; bf16 has an 8-bit mantissa (2^-8 ≈ 4e-3).
double attention_tolerance(torch::ScalarType dtype);

// fused_attention against reference_attention, outputs and gradients. kv_heads < heads (a
// divisor) checks grouped-query: the fused path takes k, v as they are, the reference repeats them.
EquivalenceReport check_attention_equivalence(int64_t batch, int64_t heads, int64_t seq,
                                              int64_t head_dim, torch::ScalarType dtype,
                                              torch::Device device, uint64_t seed,
                                              int64_t kv_heads = 0);

// ---- Fast paths against their reference twins ----
//
// Every fast path the model takes (a fused kernel, a chunked loss) has a reference twin: the
// plain ATen ops it must equal. A fast path that has never met the renter's GPU must not train
// unchecked, so `lmtrain fit` (every start-up, resumes too) and `lmtrain check` run each one
// against its twin on the run's own device, forward and backward, and a mismatch switches the
// model to the reference, loudly.

struct FastPathCheck {
  std::string name;       // "attention.sdpa"
  std::string what;       // one line: the fast path and its twin
  double out_err = 0;     // max |fast - ref| / max |ref| over the outputs
  double grad_err = 0;    // the same over the input gradients
  double tolerance = 0;   // relative; see fast_path_tolerance
  bool ok() const { return out_err <= tolerance && grad_err <= tolerance; }
  std::string summary() const;
};

// Relative tolerance of a fast path against its twin: fp32 reorders sums of unit-scale terms
// (~1e-6, 1e-5 leaves room for D- and V-long reductions); bf16 rounds to 8 mantissa bits
// (2^-8 ≈ 4e-3 per rounding; 2e-2 admits a few roundings in different places). A broken path is
// off by far more (the debug break is 5%).
double fast_path_tolerance(torch::ScalarType dtype);

struct FastPath {
  std::string name;
  // Whether `model` uses this fast path at all on `device` with compute dtype `dtype`
  // (attention "reference" does not; attention.cpu only where cpu_causal_attention_routes).
  std::function<bool(Transformer&, torch::Device, torch::ScalarType)> used;
  // Fast path against its twin on inputs shaped like `model`'s, in `dtype` on `device`.
  std::function<FastPathCheck(Transformer&, torch::Device, torch::ScalarType, uint64_t)> check;
  // Turns the fast path off (the reference from then on).
  std::function<void(Transformer&)> fall_back;
};

// The registry: every fast path of the model, in the order they are checked.
const std::vector<FastPath>& fast_paths();

struct FastPathReport {
  std::vector<FastPathCheck> checks;   // the paths the model uses on this device
  std::vector<std::string> fell_back;  // names of the paths switched to their reference
  std::vector<std::string> notes;      // what was done besides: another SDPA backend taken, ...
  std::string sdpa_backend;            // the SDPA backend taken after the one asked for failed
  // Non-empty: training cannot go on in this process (the CUDA context lost to a sticky error, or no
  // attention that works at the run's shape); says why and what to change.
  std::string error;
  bool ok() const { return fell_back.empty() && error.empty(); }
  std::string summary() const;
};

// The run's micro-batch, for each fast path's second check at the run's own shape: the start-up
// checks run at B = 2, T = 64, and a kernel may fail only at the real shape (no kernel for it, out
// of memory, a memory fault). memory_bytes: the device's memory for the reference attention's
// estimate (0: the CUDA device's own; no limit on a CPU).
struct RunShape {
  int64_t batch = 0, seq = 0;
  int64_t memory_bytes = 0;
  bool given() const { return batch > 0 && seq > 0; }
};

// Checks every fast path `model` uses on `device` against its reference in `dtype`; a mismatch
// (or an exception from the fast path) switches that path off in `model` and names it. With `run`
// given, each path that passed is checked once more at the run's shape (attention: SDPA on the
// whole micro-batch, compared on its first row; the chunked loss keeps its fixed-size chunks).
// An SDPA failure first tries the other backends (flash, efficient, cudnn), each verified again
// (model/sdpa_recovery.cpp); only when none passes does attention fall back to the reference, and
// when that would not fit at the run's shape, or a failure left the CUDA context unusable,
// `error` says so and nothing more is checked.
FastPathReport verify_fast_paths(Transformer& model, torch::Device device, torch::ScalarType dtype,
                                 uint64_t seed, RunShape run = {});

// ---- model/sdpa_recovery.cpp: what verify_fast_paths does when a fast path fails ----

// The SDPA backend set process-wide (set_sdpa_backend): "auto" when all are allowed.
std::string sdpa_backend_in_use();
// After SDPA failed with `failed` on the backend in use: each other backend (flash, efficient,
// cudnn) set and `check` run again (the start-up shape and the run's); the first that passes is
// kept (r->sdpa_backend, a note) and its check returned. None: the backend in use restored, a
// note naming each failure, and `failed` returned. Stops early when the device became unusable.
FastPathCheck retry_sdpa_backends(const FastPathCheck& failed, torch::Device device,
                                  const std::function<FastPathCheck()>& check, FastPathReport* r);
// Whether `device` still runs work after a failed check; a CUDA context lost to a sticky error (a
// kernel memory fault) sets r->error, naming `path`.
bool device_usable(torch::Device device, const std::string& path, FastPathReport* r);
// Empty when the reference attention's saved [T, T] scores fit the device at the run's shape;
// otherwise why not and what to change.
std::string reference_attention_misfit(const ModelConfig& cfg, torch::ScalarType dtype, torch::Device device,
                                       const RunShape& run);

struct CausalityReport {
  double max_leak = 0;  // largest |Δlogit| at positions <= t when token t+1 changed
  int positions_checked = 0;
  bool ok() const { return max_leak == 0.0; }
  std::string summary() const;
};

// For several t, changes token t+1 and checks that logits at positions 0..t are bit-identical.
CausalityReport check_causality(Transformer& model, int64_t seq, uint64_t seed);

struct InitLossReport {
  double loss = 0;
  double expected = 0;  // ln(vocab)
  double band = 0;
  bool ok() const { return std::abs(loss - expected) <= band; }
  std::string summary() const;
};

// At initialisation logits are near zero, so the loss must be close to ln(vocab):
// a large gap means a broken init, a wrong head or a label shift bug.
InitLossReport check_init_loss(Transformer& model, int64_t batch, int64_t seq, uint64_t seed);

}  // namespace lm::model
