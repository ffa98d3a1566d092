#include "model/recompute.h"

#include <ATen/autocast_mode.h>

#include <utility>

namespace lm::model {
namespace {

// The function of a recomputed block, kept by the graph until its backward has run.
struct BlockFnHolder : torch::CustomClassHolder {
  explicit BlockFnHolder(BlockFn f) : fn(std::move(f)) {}
  BlockFn fn;
};

// The autocast state of one device type, set for a scope and put back after it.
class AutocastState {
 public:
  explicit AutocastState(at::DeviceType t)
      : type_(t), enabled_(at::autocast::is_autocast_enabled(t)), dtype_(at::autocast::get_autocast_dtype(t)) {}
  void apply() const {
    at::autocast::set_autocast_enabled(type_, enabled_);
    at::autocast::set_autocast_dtype(type_, dtype_);
  }
  at::DeviceType type() const { return type_; }
  bool enabled() const { return enabled_; }
  at::ScalarType dtype() const { return dtype_; }

 private:
  at::DeviceType type_;
  bool enabled_;
  at::ScalarType dtype_;
};

struct Recompute : public torch::autograd::Function<Recompute> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                c10::intrusive_ptr<BlockFnHolder> holder) {
    const AutocastState autocast(inputs[0].device().type());
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    ctx->saved_data["autocast_enabled"] = autocast.enabled();
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(autocast.dtype());
    ctx->save_for_backward(inputs.vec());
    torch::NoGradGuard no_graph;  // the outputs only: nothing inside is kept for backward
    // A weight's cast made without a graph must not be cached: backward's recompute would get that
    // copy back and no gradient would reach the weight. LibTorch 2.11 does not cache under no_grad
    // (the test passes with this line removed); older ones did (torch.utils.checkpoint's reason
    // for running its forward with the cache off), so it is kept off here explicitly.
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    auto out = holder->fn(inputs.vec());
    at::autocast::set_autocast_cache_enabled(cache);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> inputs;
    for (const auto& t : saved) inputs.push_back(t.detach().requires_grad_(t.requires_grad()));
    // The forward's autocast state, whatever the thread backward runs on has (a CUDA backward
    // runs on the engine's device thread); the caller's is put back after.
    const at::DeviceType type = inputs[0].device().type();
    const AutocastState outer(type);
    at::autocast::set_autocast_enabled(type, ctx->saved_data["autocast_enabled"].toBool());
    at::autocast::set_autocast_dtype(type, static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt()));
    std::vector<torch::Tensor> outputs;
    {
      torch::AutoGradMode graph(true);
      auto holder = c10::static_intrusive_pointer_cast<BlockFnHolder>(ctx->saved_data["fn"].toCapsule());
      outputs = holder->fn(inputs);
    }
    outer.apply();
    std::vector<torch::Tensor> outs, grads;
    for (size_t i = 0; i < outputs.size(); ++i)
      if (grad_out[i].defined() && outputs[i].requires_grad()) {
        outs.push_back(outputs[i]);
        grads.push_back(grad_out[i]);
      }
    if (!outs.empty()) torch::autograd::backward(outs, grads);
    torch::autograd::variable_list out;
    for (auto& in : inputs) out.push_back(in.requires_grad() ? in.grad() : torch::Tensor());
    out.push_back(torch::Tensor());  // the holder
    return out;
  }
};

}  // namespace

std::vector<torch::Tensor> recompute(const BlockFn& fn, const std::vector<torch::Tensor>& inputs) {
  TORCH_CHECK(!inputs.empty() && inputs[0].defined(), "recompute: a block needs at least one input tensor");
  if (!torch::GradMode::is_enabled()) return fn(inputs);
  return Recompute::apply(at::TensorList(inputs), c10::make_intrusive<BlockFnHolder>(fn));
}

}  // namespace lm::model
