// Fixtures shared by the quantised-encoder tests (encoder_quant_test, fp8_per_tensor_test,
// encoder_memory_test): a small encoder, packed random batches, FP16 options for a quantised
// encoder, and an agreement count.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "engine/cuda/encoder_quant.h"

namespace hotline::engine::cuda::test {

// 2 layers, hidden 256, 4 heads, FFN 1024, vocabulary 3,000 (positions up to 160).
inline EncoderConfig SmallQuantConfig() {
  EncoderConfig c;
  c.layers = 2;
  c.hidden = 256;
  c.heads = 4;
  c.intermediate = 1024;
  c.vocab = 3000;
  c.max_pos = 160;
  return c;
}

// A packed batch with these cumulative sequence lengths: random ids in [0, vocab), token types
// 0/1.
inline EncoderBatch RandomBatch(std::mt19937_64& rng, const EncoderConfig& c,
                                std::vector<int32_t> cu) {
  EncoderBatch b;
  b.cu = std::move(cu);
  for (int t = 0; t < b.cu.back(); ++t) {
    b.ids.push_back(int32_t(rng() % c.vocab));
    b.types.push_back(int32_t(rng() % 2));
  }
  return b;
}

// FP16 encoder options, up to max_batch sequences of 128 tokens; quantised as q with these
// activation scales (kNone: the unquantised encoder calibration runs on).
inline EncoderOptions QuantEncoderOptions(EncoderQuant q, const std::vector<float>& scales,
                                          int max_batch = 16,
                                          WeightScaling fp8_scaling = WeightScaling::kPerChannel) {
  EncoderOptions o;
  o.dtype = DType::kF16;
  o.max_batch = max_batch;
  o.max_seq = 128;
  o.quant = q;
  o.act_scales = scales;
  o.fp8_weight_scaling = fp8_scaling;
  o.fp8_fast_accum_max_k = 0;  // exact accumulation: what the CPU simulations compute
  return o;
}

// How many positions of a and b (over the shorter) hold the same value.
template <typename A, typename B>
int Agree(const std::vector<A>& a, const std::vector<B>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += a[i] == b[i];
  return n;
}

}  // namespace hotline::engine::cuda::test
