// AdamW over named parameters, with weight decay on matrices only, and its state as named
// tensors so checkpoints (optimizer.safetensors) resume it bit-exactly.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "train/config.h"
#include "train/param_groups.h"

namespace lm::train {

// ZeRO-1 (train/optimizer_shards.h): the part of one parameter this rank updates, elements
// [begin, begin + len) of the flattened parameter (len 0: none), and its averaged gradient there.
struct ParamPart {
  int64_t begin = 0, len = 0;
  torch::Tensor grad;  // [len], a view into a reduce-scattered gradient shard
  // [len] fp32, what AdamW updates: undefined for the parameter's own part; the distributed
  // optimizer's sharded master weights for a bf16 working weight.
  torch::Tensor value;
};

class AdamW {
 public:
  // Decay applies to 2-D weights except the token embedding (unless decay_embeddings);
  // norms (1-D) never decay. Each parameter group (train/param_groups.h) updates at lr times its
  // train.param_groups scale and counts its own steps: a group whose parameters had no gradient
  // in a step (frozen in the first stage) is not advanced, so its bias correction starts at its
  // first update.
  // `parts` (ZeRO-1), one per parameter in `params`' order: the moments cover each part only and
  // the update writes it in place; whether a parameter had a gradient this step is still read
  // from its .grad (defined or not, the same on every rank).
  AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& params, const TrainConfig& cfg,
        const std::vector<ParamPart>* parts = nullptr);

  // One update with learning rate `lr`: at::_fused_adamw_, the kernel of
  // torch.optim.AdamW(fused=True). `found_inf` (a float32 0/1 scalar on the parameters' device,
  // or undefined for 0) skips the update on the device: no parameter, moment or step count
  // changes, and the host never waits to learn whether it did (torch.amp's GradScaler protocol).
  void step(double lr, const torch::Tensor& found_inf = {});
  // The same update with the learning rate read on the device from the tensor set_lr wrote
  // (float32, one per device): a captured CUDA graph replays it with the current value. The
  // trainer uses it for every CUDA step, graphed or not, so both round lr to float32 alike.
  void set_lr(double lr);
  // The group scales of optimizer step `step` (0-based; lr_scale_at): call before its set_lr/step.
  void set_step(int64_t step);
  void step_device_lr(const torch::Tensor& found_inf = {});
  void zero_grad();

  // Updates applied so far. Reads the device's step count (a host sync on GPUs: not in the loop).
  int64_t steps_taken() const;
  const std::vector<std::string>& decayed() const { return decayed_; }
  const std::vector<std::string>& not_decayed() const { return not_decayed_; }

  // "<param>.exp_avg", "<param>.exp_avg_sq", "__step__" (the most steps of any group) and
  // "__step__.<group>" (a read). A state without the per-group counts (before groups) loads
  // "__step__" into every group. With parts, the moments are this rank's parts ([len]) (a ZeRO-1
  // checkpoint writes them per rank: train/sharded_checkpoint.h); load_state takes whole moments and
  // keeps this rank's parts of them, or reads just those (the MomentReader overload below).
  model::NamedTensors state() const;
  // Bytes of the moments this process holds (exp_avg + exp_avg_sq).
  int64_t moment_bytes() const;
  absl::Status load_state(const model::NamedTensors& state, const std::string& source);

  // What a per-rank checkpoint file holds (train/sharded_checkpoint.h): each parameter's moments
  // over elements [begin, begin + len) of the flattened parameter of `shape` (the whole without parts).
  struct MomentPart {
    std::string name;
    std::vector<int64_t> shape;
    int64_t begin = 0, len = 0;
    torch::Tensor exp_avg, exp_avg_sq;  // [len] (parts) or the parameter's shape
  };
  std::vector<MomentPart> moment_parts() const;
  // Fills `out` (`out.numel()` elements, contiguous) with elements [begin, begin + out.numel()) of
  // the flattened moment `key` ("<param>.exp_avg", ...) of a parameter of `shape`.
  using MomentReader =
      std::function<absl::Status(const std::string& key, at::IntArrayRef shape, int64_t begin, torch::Tensor out)>;
  // load_state with the moments read piecewise (only this rank's elements) and the step counts
  // ("__step__", "__step__.<group>") given: any world size loads any layout.
  absl::Status load_state(const MomentReader& read, const std::map<std::string, int64_t>& steps,
                          const std::string& source);

 private:
  struct Slot {
    std::string name;
    torch::Tensor param, exp_avg, exp_avg_sq;  // param: the parameter, or (parts) a [len] view of it
    bool decay;
    int group;  // ParamGroup
    torch::Tensor owner, grad;  // the whole parameter (its .grad says "trained this step"); parts: the gradient
    int64_t begin = 0;          // parts: the first element of `param` in the flattened owner
    bool has_grad() const { return owner.grad().defined() && param.numel() > 0; }
    torch::Tensor gradient() const { return grad.defined() ? grad : owner.grad(); }
  };
  std::vector<Slot> slots_;
  std::vector<std::string> decayed_, not_decayed_;
  double beta1_, beta2_, eps_, weight_decay_;
  ParamGroupsConfig groups_;
  double lr_scale_[kParamGroups];
  // Each group's step count t as a float32 scalar per device, advanced on the device by
  // 1 - found_inf when the group is updated: bias correction reads it, and a skipped step must not
  // advance it. Keyed by (device, group).
  using Key = std::pair<std::string, int>;
  std::map<Key, torch::Tensor> step_tensors_;
  int64_t loaded_t_[kParamGroups] = {};  // t from load_state: the value a step tensor starts from
  torch::Tensor& step_tensor(const torch::Device& device, int group);
  std::map<Key, torch::Tensor> lr_tensors_;  // set_lr's values times each group's scale, per device
  int64_t group_steps(int group) const;
  // The update with lr as a number, or (lr < 0) from lr_tensors_.
  void update(double lr, const torch::Tensor& found_inf);
  void fused_update(int group, bool decay, double lr, const torch::Tensor& found_inf);  // one kernel call
};

// The global gradient norm and what the non-finite handler needs, all on the gradients' device.
struct GradNorm {
  torch::Tensor total;      // float32 scalar: L2 norm of all gradients before clipping
  torch::Tensor first_bad;     // int64 scalar: index into `present` of the first non-finite gradient, -1 if none
  std::vector<int64_t> present;  // indexes into `params` of the gradients that were defined
};

// Global L2 norm of all gradients (one foreach norm, as torch.nn.utils.clip_grad_norm_), and
// when max_norm > 0 clips in place by min(1, max_norm / (norm + 1e-6)) computed on the device:
// no host sync. A non-finite norm leaves the gradients non-finite (the update is skipped then).
GradNorm clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace lm::train
