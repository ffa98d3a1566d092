// CPython's random.Random, as far as lm-evaluation-harness's few-shot sampler uses it:
// Random(seed) for a non-negative seed below 2^32 (init_by_array of MT19937 with one 32-bit key),
// getrandbits(k <= 32), _randbelow and sample(population, k) (the index it draws, both of sample's
// algorithms). Equal to CPython 3.11 draw for draw (tests/eval/tasks_bn_test.cpp holds its values).
#pragma once

#include <cstdint>
#include <vector>

namespace lm::eval {

class PyRandom {
 public:
  explicit PyRandom(uint32_t seed);
  uint32_t genrand_uint32();
  uint32_t getrandbits(int k);  // 0 <= k <= 32
  uint64_t randbelow(uint64_t n);  // n < 2^32
  // Indices into a population of n, as random.sample(range(n), k) returns them.
  std::vector<uint64_t> sample(uint64_t n, uint64_t k);

 private:
  static constexpr int kN = 624;
  uint32_t mt_[kN];
  int index_ = kN;
};

}  // namespace lm::eval
