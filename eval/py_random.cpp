#include "eval/py_random.h"

#include <cmath>
#include <set>

namespace lm::eval {

PyRandom::PyRandom(uint32_t seed) {
  // init_genrand(19650218), then init_by_array({seed}) (Modules/_randommodule.c).
  mt_[0] = 19650218u;
  for (int i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  int i = 1;
  for (int k = kN; k > 0; --k) {  // key length 1: j stays 0
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + seed;
    if (++i >= kN) mt_[0] = mt_[kN - 1], i = 1;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    if (++i >= kN) mt_[0] = mt_[kN - 1], i = 1;
  }
  mt_[0] = 0x80000000u;
}

uint32_t PyRandom::genrand_uint32() {
  if (index_ >= kN) {
    for (int k = 0; k < kN; ++k) {
      const uint32_t y = (mt_[k] & 0x80000000u) | (mt_[(k + 1) % kN] & 0x7fffffffu);
      mt_[k] = mt_[(k + 397) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  return y ^ (y >> 18);
}

uint32_t PyRandom::getrandbits(int k) { return k <= 0 ? 0 : genrand_uint32() >> (32 - k); }

uint64_t PyRandom::randbelow(uint64_t n) {
  if (n == 0) return 0;
  int k = 0;
  while ((n >> k) != 0) ++k;  // n.bit_length()
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<uint64_t> PyRandom::sample(uint64_t n, uint64_t k) {
  std::vector<uint64_t> out(k);
  uint64_t setsize = 21;
  if (k > 5) setsize += static_cast<uint64_t>(std::pow(4.0, std::ceil(std::log(3.0 * k) / std::log(4.0))));
  if (n <= setsize) {  // pool algorithm
    std::vector<uint64_t> pool(n);
    for (uint64_t i = 0; i < n; ++i) pool[i] = i;
    for (uint64_t i = 0; i < k; ++i) {
      const uint64_t j = randbelow(n - i);
      out[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
    return out;
  }
  std::set<uint64_t> selected;  // set algorithm
  for (uint64_t i = 0; i < k; ++i) {
    uint64_t j = randbelow(n);
    while (selected.count(j)) j = randbelow(n);
    selected.insert(j);
    out[i] = j;
  }
  return out;
}

}  // namespace lm::eval
