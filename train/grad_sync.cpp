#include "train/grad_sync.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>
#include <mutex>

#include "core/log.h"

namespace lm::train {

namespace {
using Clock = std::chrono::steady_clock;

struct Bucket {
  std::vector<size_t> params;   // indexes into State::params, in bucket order
  std::vector<int64_t> offset;  // element offset of each parameter in `flat`
  torch::Tensor flat;           // persistent [numel] buffer, the all-reduce runs on it in place
  torch::Tensor shard;          // ZeRO-1: [numel / world], the reduce-scatter's output
  torch::Tensor low, low_shard; // reduce_dtype bf16: what the collective carries, for the step's sync
  int64_t pending = 0;          // parameters whose gradient is not final yet in this step
  bool launched = false;
  std::function<void()> wait;
};
}  // namespace

struct GradSync::State {
  std::vector<torch::Tensor> params;
  int world = 1;
  StartSum start_sum;
  StartCollective reduce_scatter;  // ZeRO-1 only
  bool overlap = true;
  bool accumulate = false;         // ZeRO-1: micro-batch gradients summed in the buckets, no .grad kept
  torch::ScalarType reduce_dtype = torch::kFloat32;
  std::vector<char> got;           // accumulate: a gradient of this parameter arrived in this step
  int64_t bucket_bytes = 25 << 20;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of, slot_of;  // parameter index -> bucket, position in the bucket
  std::vector<int> fired;                  // hook calls per parameter in this step (tied: must be 1)
  // Keeps each parameter's AccumulateGrad node alive: autograd holds it weakly, and a node
  // recreated by the next forward would not carry the hook.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> hook_keys;
  std::mutex mu;   // hooks may run on an autograd device thread (CUDA)
  bool armed = false;
  size_t next_launch = 0;  // buckets start strictly in index order: every rank issues the same sequence
  GradSyncStats stats;
  bool warned_late = false;

  void launch(Bucket& b) {
    if (reduce_dtype != torch::kFloat32) {
      b.low = b.flat.to(reduce_dtype);
      if (b.shard.defined()) b.low_shard = torch::empty({b.shard.numel()}, b.low.options());
      b.wait = b.shard.defined() ? reduce_scatter(b.low_shard, b.low) : start_sum(b.low);
    } else {
      b.wait = b.shard.defined() ? reduce_scatter(b.shard, b.flat) : start_sum(b.flat);
    }
    b.launched = true;
  }
  // After the wait: a narrower collective's result widened back into the fp32 bucket (or shard).
  void widen(Bucket& b) {
    if (!b.low.defined()) return;
    if (b.shard.defined()) b.shard.copy_(b.low_shard);
    else b.flat.copy_(b.low);
    b.low = torch::Tensor();
    b.low_shard = torch::Tensor();
  }
  void init(const std::vector<BucketPlan>& plan, std::vector<torch::Tensor> flats);
  void add_hooks(const std::shared_ptr<State>& self);

  // Parameter i's elements in its bucket.
  torch::Tensor slot(size_t i) {
    Bucket& b = buckets[bucket_of[i]];
    return b.flat.narrow(0, b.offset[slot_of[i]], params[i].numel());
  }

  void copy_in(size_t i) {
    const auto& g = params[i].grad();
    if (g.defined()) slot(i).copy_(g.reshape({-1}));
    else slot(i).zero_();  // an unused parameter adds nothing (same on every rank: same graph)
  }

  // accumulate: this micro-batch's gradient of parameter i into its bucket slot (a copy the
  // first time in a step, as AccumulateGrad takes the first one, then sums in fp32), and the
  // .grad dropped.
  void add_in(size_t i) {
    auto& g = params[i].mutable_grad();
    if (!g.defined()) return;
    if (got[i]) slot(i).add_(g.reshape({-1}));
    else slot(i).copy_(g.reshape({-1}));
    got[i] = 1;
    g = torch::Tensor();
  }

  // A parameter's gradient is final (its AccumulateGrad ran): copy it into its bucket, and start
  // every bucket that is complete and next in line.
  void ready(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    torch::NoGradGuard ng;
    if (accumulate) add_in(i);
    if (!armed) return;
    if (fired[i]++ > 0) return;  // counted; finish() reports it
    if (!accumulate) copy_in(i);
    --buckets[bucket_of[i]].pending;
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      launch(buckets[next_launch++]);
      ++stats.launched_in_backward;
    }
  }
};

namespace {
struct ReadyHook : torch::autograd::FunctionPostHook {
  std::weak_ptr<GradSync::State> st;
  size_t index;
  ReadyHook(std::weak_ptr<GradSync::State> s, size_t i) : st(std::move(s)), index(i) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto s = st.lock()) s->ready(index);
    return outputs;
  }
};
}  // namespace

std::vector<BucketPlan> plan_buckets(const std::vector<torch::Tensor>& params, int64_t bucket_bytes, int64_t align,
                                     int64_t pad_to, const std::vector<int>& kind) {
  TORCH_CHECK(align >= 1 && pad_to >= 1, "plan_buckets: align ", align, " and pad_to ", pad_to, " must be >= 1");
  TORCH_CHECK(kind.empty() || kind.size() == params.size(), "plan_buckets: ", kind.size(), " kinds for ",
              params.size(), " parameters");
  std::vector<BucketPlan> out;
  int64_t bytes = 0;
  const torch::Tensor* last = nullptr;
  size_t last_k = 0;
  // Reverse registration order ≈ the order backward finishes gradients (last layer first).
  for (size_t k = params.size(); k-- > 0;) {
    const auto& p = params[k];
    const int64_t pb = p.numel() * p.element_size();
    const bool fits = last != nullptr && bytes + pb <= bucket_bytes && last->scalar_type() == p.scalar_type() &&
                      last->device() == p.device() && (kind.empty() || kind[k] == kind[last_k]);
    if (!fits) { out.emplace_back(); bytes = 0; }
    BucketPlan& b = out.back();
    const int64_t at = (b.numel + align - 1) / align * align;
    b.params.push_back(k);
    b.offset.push_back(at);
    b.numel = at + p.numel();
    bytes += pb;
    last = &p;
    last_k = k;
  }
  for (auto& b : out) b.numel = (b.numel + pad_to - 1) / pad_to * pad_to;
  return out;
}

void GradSync::State::init(const std::vector<BucketPlan>& plan, std::vector<torch::Tensor> flats) {
  const size_t n = params.size();
  bucket_of.assign(n, 0);
  slot_of.assign(n, 0);
  fired.assign(n, 0);
  buckets.resize(plan.size());
  for (size_t bi = 0; bi < plan.size(); ++bi) {
    Bucket& b = buckets[bi];
    b.params = plan[bi].params;
    b.offset = plan[bi].offset;
    b.flat = std::move(flats[bi]);
    TORCH_CHECK(b.flat.numel() == plan[bi].numel, "GradSync: bucket ", bi, " has ", b.flat.numel(), " elements, plan ",
                plan[bi].numel);
    for (size_t j = 0; j < b.params.size(); ++j) {
      const size_t k = b.params[j];
      TORCH_CHECK(params[k].requires_grad(), "GradSync: parameter ", k, " does not require grad");
      bucket_of[k] = bi;
      slot_of[k] = j;
    }
  }
  stats.buckets = static_cast<int64_t>(buckets.size());
}

void GradSync::State::add_hooks(const std::shared_ptr<State>& self) {
  for (size_t k = 0; k < params.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params[k]);
    TORCH_CHECK(acc != nullptr, "GradSync: parameter ", k, " is not a leaf (no AccumulateGrad node)");
    hook_keys.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(self, k)));
    accumulators.push_back(std::move(acc));
  }
}

GradSync::GradSync(std::vector<torch::Tensor> params, int world, StartSum start_sum, bool overlap,
                   int64_t bucket_bytes)
    : st_(std::make_shared<State>()) {
  State& s = *st_;
  s.params = std::move(params);
  s.world = world;
  s.start_sum = std::move(start_sum);
  s.overlap = overlap;
  s.bucket_bytes = bucket_bytes;
  s.stats = {};
  if (!overlap) return;  // the post-backward path builds its buckets from the gradients present
  const auto plan = plan_buckets(s.params, bucket_bytes);
  std::vector<torch::Tensor> flats;
  for (const auto& b : plan)
    flats.push_back(torch::empty({b.numel}, s.params[b.params.back()].options().requires_grad(false)));
  s.init(plan, std::move(flats));
  s.add_hooks(st_);
}

GradSync::GradSync(std::vector<torch::Tensor> params, int world, const std::vector<BucketPlan>& plan,
                   std::vector<torch::Tensor> flats, std::vector<torch::Tensor> shards, StartCollective reduce_scatter)
    : st_(std::make_shared<State>()) {
  State& s = *st_;
  s.params = std::move(params);
  s.world = world;
  s.reduce_scatter = std::move(reduce_scatter);
  s.overlap = true;
  s.accumulate = true;
  s.got.assign(s.params.size(), 0);
  s.init(plan, std::move(flats));
  TORCH_CHECK(shards.size() == s.buckets.size(), "GradSync: ", shards.size(), " shards for ", s.buckets.size(), " buckets");
  for (size_t b = 0; b < shards.size(); ++b) {
    TORCH_CHECK(shards[b].numel() * world == s.buckets[b].flat.numel(), "GradSync: bucket ", b, " shard of ",
                shards[b].numel(), " elements is not 1/", world, " of ", s.buckets[b].flat.numel());
    s.buckets[b].shard = std::move(shards[b]);
  }
  s.add_hooks(st_);
}

GradSync::~GradSync() {
  for (size_t k = 0; k < st_->accumulators.size(); ++k) st_->accumulators[k]->del_post_hook(st_->hook_keys[k]);
}

bool GradSync::overlap() const { return st_->overlap; }

void GradSync::set_reduce_dtype(torch::ScalarType dtype) {
  TORCH_CHECK(dtype == torch::kFloat32 || dtype == torch::kBFloat16, "GradSync: reduce dtype ", dtype,
              " (fp32 or bf16)");
  TORCH_CHECK(st_->overlap || dtype == torch::kFloat32, "GradSync: a bf16 reduction needs the overlapped buckets");
  st_->reduce_dtype = dtype;
}
const GradSyncStats& GradSync::stats() const { return st_->stats; }

std::vector<std::vector<size_t>> GradSync::bucket_layout() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : st_->buckets) out.push_back(b.params);
  return out;
}

void GradSync::begin_step() {
  State& s = *st_;
  std::lock_guard<std::mutex> lock(s.mu);
  std::fill(s.got.begin(), s.got.end(), 0);
}

void GradSync::before_backward(bool sync) {
  State& s = *st_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.overlap || !sync) { s.armed = false; return; }
  if (s.armed) return;  // a second synced backward in the same step: already counting
  s.armed = true;
  s.next_launch = 0;
  s.stats.launched_in_backward = 0;
  std::fill(s.fired.begin(), s.fired.end(), 0);
  for (auto& b : s.buckets) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.launched = false;
    b.wait = nullptr;
  }
}

namespace {
// The post-backward path: flatten the present gradients in registration order into buckets of
// about `bucket_bytes`, start them all, then wait and scatter back.
int64_t average_after_backward(const std::vector<torch::Tensor>& params, int world, const StartSum& start_sum,
                               int64_t bucket_bytes) {
  struct Flat { std::vector<torch::Tensor> grads; torch::Tensor flat; std::function<void()> wait; };
  std::vector<Flat> buckets(1);
  int64_t bytes = 0;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    if (bytes > bucket_bytes) { buckets.emplace_back(); bytes = 0; }
    buckets.back().grads.push_back(p.grad());
    bytes += p.grad().numel() * p.grad().element_size();
  }
  for (auto& b : buckets) {
    if (b.grads.empty()) continue;
    std::vector<torch::Tensor> flat;
    for (auto& g : b.grads) flat.push_back(g.reshape({-1}));
    b.flat = torch::cat(flat);
    b.wait = start_sum(b.flat);
  }
  const double inv = 1.0 / world;
  int64_t n = 0;
  for (auto& b : buckets) {
    if (b.grads.empty()) continue;
    ++n;
    b.wait();
    b.flat.mul_(inv);
    int64_t off = 0;
    for (auto& g : b.grads) {
      g.copy_(b.flat.narrow(0, off, g.numel()).view_as(g));
      off += g.numel();
    }
  }
  return n;
}
}  // namespace

void GradSync::finish() {
  State& s = *st_;
  const auto t0 = Clock::now();
  torch::NoGradGuard ng;
  if (!s.overlap) {
    s.stats.buckets = average_after_backward(s.params, s.world, s.start_sum, s.bucket_bytes);
    s.stats.launched_in_backward = 0;
    s.stats.wait_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  TORCH_CHECK(s.armed, "GradSync::finish without before_backward(true) in this step");
  s.armed = false;
  // Parameters whose hook did not fire (no gradient this step, or a hook lost) still go out, in
  // bucket order, so every rank issues the same collectives; only the overlap is lost.
  int64_t late = 0;
  for (size_t i = 0; i < s.params.size(); ++i) {
    TORCH_CHECK(s.fired[i] <= 1, "GradSync: the gradient of parameter ", i, " became final ", s.fired[i],
                " times in one backward (a parameter reached through two AccumulateGrad nodes?)");
    if (s.fired[i] > 0) continue;
    if (!s.accumulate) s.copy_in(i);
    else if (!s.got[i]) s.slot(i).zero_();
    --s.buckets[s.bucket_of[i]].pending;
    ++late;
  }
  while (s.next_launch < s.buckets.size()) s.launch(s.buckets[s.next_launch++]);
  if (late > 0 && !s.warned_late) {
    log_warn("data parallel: %d parameters had no gradient hook call in backward; their buckets were "
             "all-reduced after it (no overlap for them)", late);
    s.warned_late = true;
  }
  const double inv = 1.0 / s.world;
  for (auto& b : s.buckets) {
    b.wait();
    s.widen(b);
    if (b.shard.defined()) {  // ZeRO-1: the shard is the result
      b.shard.mul_(inv);
      // The placeholder says "trained this step" where .grad is read for that; it holds no bytes.
      for (size_t k : b.params)
        if (s.got[k]) s.params[k].mutable_grad() = torch::empty({0}, s.params[k].options());
      continue;
    }
    b.flat.mul_(inv);
    for (size_t j = 0; j < b.params.size(); ++j) {
      auto& p = s.params[b.params[j]];
      if (!p.grad().defined()) continue;  // stays undefined, as on every rank
      p.mutable_grad().copy_(b.flat.narrow(0, b.offset[j], p.numel()).view_as(p));
    }
  }
  s.stats.wait_s = std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace lm::train
