// The graph-captured encoder runner against the whole-model CPU reference: a small FP32 encoder
// (1e-5), a BERT-base-shaped random encoder in FP16 (1e-2) and BF16 (4e-2) on packed batches with
// lengths 1..128, graph replay vs eager, bucket reuse, and the errors a bad batch raises.
#include <gtest/gtest.h>

#include "engine/cuda/encoder.h"
#include "tests/engine/cuda/reference.h"
#include "tests/engine/cuda/test_util.h"

namespace hotline::engine::cuda {
namespace {

struct Batch {
  std::vector<int32_t> ids, types, cu;
};

Batch RandomBatch(std::mt19937_64& rng, const EncoderConfig& c, int batch, int max_len) {
  Batch b;
  b.cu = test::RandomCu(rng, batch, max_len);
  for (int t = 0; t < b.cu.back(); ++t) {
    b.ids.push_back(int32_t(rng() % c.vocab));
    b.types.push_back(int32_t(rng() % c.type_vocab));
  }
  return b;
}

void Compare(const EncoderOutputs& got, const ref::EncoderResult& want, double tol,
             const char* what, double min_intent_agreement) {
  SCOPED_TRACE(what);
  const double ei = ref::RelErr(got.intent_logits, want.intent_logits);
  const double es = ref::RelErr(got.slot_logits, want.slot_logits);
  std::printf("%s: intent logits rel err %.3g, slot logits rel err %.3g\n", what, ei, es);
  EXPECT_LE(ei, tol);
  EXPECT_LE(es, tol);
  ASSERT_EQ(got.intent.size(), want.intent.size());
  int agree = 0;
  for (size_t i = 0; i < want.intent.size(); ++i) agree += got.intent[i] == want.intent[i];
  EXPECT_GE(agree, min_intent_agreement * want.intent.size());
  // Probabilities are a softmax of the logits.
  const int n = int(got.intent_probs.size() / std::max<size_t>(1, got.intent.size()));
  for (size_t b = 0; b < got.intent.size(); ++b) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += got.intent_probs[b * n + i];
    EXPECT_NEAR(s, 1.0, 1e-4);
  }
}

TEST(CudaEncoder, SmallFp32MatchesReference) {
  std::mt19937_64 rng(test::Seed() + 11);
  EncoderConfig c;
  c.layers = 2; c.hidden = 128; c.heads = 2; c.intermediate = 256; c.vocab = 1000;
  c.max_pos = 160; c.n_intents = 10; c.n_slots = 7;
  EncoderWeights w = EncoderWeights::Random(c, rng(), 0.1f);
  EncoderOptions o;
  o.dtype = DType::kF32;
  o.max_batch = 16;
  o.max_seq = 150;
  auto enc = CudaEncoder::Create(c, w, o);
  auto ctx = enc->CreateContext();
  for (int rep = 0; rep < 3; ++rep) {
    Batch b = RandomBatch(rng, c, 1 + int(rng() % 16), 1 + int(rng() % 150));
    EncoderOutputs out;
    ctx->Run(b.ids.data(), b.types.data(), b.cu.data(), int(b.cu.size()) - 1, &out);
    Compare(out, ref::Encoder(c, w, b.ids, b.types, b.cu, false), 1e-5, "small fp32", 1.0);
  }
}

TEST(CudaEncoder, BertBaseFp16AndBf16MatchFp32Reference) {
  std::mt19937_64 rng(test::Seed() + 12);
  EncoderConfig c;  // BERT-base defaults: 12 x 768, 12 heads, 3072, vocab 21128
  EncoderWeights w = EncoderWeights::Random(c, rng());
  Batch b = RandomBatch(rng, c, 6, 128);
  b.cu = {0, 1, 8, 72, 137, 265, 298};  // lengths 1, 7, 64, 65, 128, 33
  b.ids.resize(298);
  b.types.resize(298);
  for (int t = 0; t < 298; ++t) {
    b.ids[t] = int32_t(rng() % c.vocab);
    b.types[t] = int32_t(rng() % 2);
  }
  const auto want_erf = ref::Encoder(c, w, b.ids, b.types, b.cu, false);
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (bool exact : {false, true}) {
      EncoderOptions o;
      o.dtype = t;
      o.max_batch = 8;
      o.max_seq = 128;
      o.exact_gelu = exact;
      auto enc = CudaEncoder::Create(c, w, o);
      auto ctx = enc->CreateContext();
      EncoderOutputs out;
      ctx->Run(b.ids.data(), b.types.data(), b.cu.data(), 6, &out);
      const std::string what = std::string("bert-base ") + DTypeName(t) +
                               (exact ? " erf gelu" : " fused tanh gelu") +
                               " vs fp32 erf reference";
      Compare(out, want_erf, test::Tol(t), what.c_str(), 5.0 / 6.0);
    }
  }
}

TEST(CudaEncoder, GraphReplayEqualsEagerAndBucketsAreReused) {
  std::mt19937_64 rng(test::Seed() + 13);
  EncoderConfig c;
  c.layers = 3; c.hidden = 256; c.heads = 4; c.intermediate = 1024; c.vocab = 5000;
  EncoderWeights w = EncoderWeights::Random(c, rng());
  EncoderOptions o;
  o.max_batch = 32;
  o.max_seq = 128;
  auto enc = CudaEncoder::Create(c, w, o);
  auto graph_ctx = enc->CreateContext();
  EncoderOptions eager_opt = o;
  eager_opt.use_graphs = false;
  auto eager_enc = CudaEncoder::Create(c, w, eager_opt);
  auto eager_ctx = eager_enc->CreateContext();
  EncoderOutputs g1, g2, e1;
  for (int rep = 0; rep < 4; ++rep) {
    Batch b = RandomBatch(rng, c, 1 + int(rng() % 32), 1 + int(rng() % 128));
    const int B = int(b.cu.size()) - 1;
    graph_ctx->Run(b.ids.data(), b.types.data(), b.cu.data(), B, &g1);
    eager_ctx->Run(b.ids.data(), b.types.data(), b.cu.data(), B, &e1);
    graph_ctx->Run(b.ids.data(), b.types.data(), b.cu.data(), B, &g2);  // replay
    EXPECT_EQ(g1.slot_logits, g2.slot_logits);
    EXPECT_EQ(g1.intent_logits, g2.intent_logits);
    // Same kernels and algorithms, but the eager encoder tuned on its own: allow rounding.
    EXPECT_LE(ref::RelErr(g1.slot_logits, e1.slot_logits), 1e-2);
    EXPECT_LE(ref::RelErr(g1.intent_logits, e1.intent_logits), 1e-2);
  }
  const int graphs = graph_ctx->graphs();
  Batch b = RandomBatch(rng, c, 3, 40);
  graph_ctx->Run(b.ids.data(), nullptr, b.cu.data(), 3, &g1);
  graph_ctx->Run(b.ids.data(), nullptr, b.cu.data(), 3, &g2);
  EXPECT_LE(graph_ctx->graphs(), graphs + 1);
  EXPECT_EQ(g1.slot_logits, g2.slot_logits);
  // A bucket's graph replayed after other buckets ran: its staging (inputs and outputs packed
  // per bucket, CudaEncoderContext::PointStaging) must be where that graph was captured.
  Batch big = RandomBatch(rng, c, 29, 120);
  EncoderOutputs g3, e3;
  graph_ctx->Run(big.ids.data(), big.types.data(), big.cu.data(), 29, &g3);  // another bucket
  graph_ctx->Run(b.ids.data(), nullptr, b.cu.data(), 3, &g2);                // back to the first
  EXPECT_EQ(g1.slot_logits, g2.slot_logits);
  EXPECT_EQ(g1.intent_logits, g2.intent_logits);
  eager_ctx->Run(big.ids.data(), big.types.data(), big.cu.data(), 29, &e3);
  EXPECT_LE(ref::RelErr(g3.slot_logits, e3.slot_logits), 1e-2);
  EXPECT_LE(ref::RelErr(g3.intent_logits, e3.intent_logits), 1e-2);
}

TEST(CudaEncoder, BadBatchesThrowClearErrors) {
  EncoderConfig c;
  c.layers = 1; c.hidden = 64; c.heads = 2; c.intermediate = 128; c.vocab = 100; c.max_pos = 64;
  std::mt19937_64 rng(test::Seed() + 14);
  EncoderWeights w = EncoderWeights::Random(c, rng());
  EncoderOptions o;
  o.max_batch = 4;
  o.max_seq = 32;
  auto enc = CudaEncoder::Create(c, w, o);
  auto ctx = enc->CreateContext();
  EncoderOutputs out;
  std::vector<int32_t> ids(40, 5), cu = {0, 40};
  EXPECT_THROW(ctx->Run(ids.data(), nullptr, cu.data(), 1, &out), Error);  // too long
  cu = {0, 4};
  ids[2] = 100;
  try {
    ctx->Run(ids.data(), nullptr, cu.data(), 1, &out);
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
  }
  ids[2] = 5;
  std::vector<int32_t> cu5 = {0, 1, 2, 3, 4, 5};
  EXPECT_THROW(ctx->Run(ids.data(), nullptr, cu5.data(), 5, &out), Error);  // too many
  std::vector<int32_t> bad = {0, 3, 2};
  EXPECT_THROW(ctx->Run(ids.data(), nullptr, bad.data(), 2, &out), Error);
  // Weights of the wrong size are named.
  EncoderWeights w2 = w;
  w2.layers[0].ff1_b.pop_back();
  try {
    CudaEncoder::Create(c, w2, o);
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FFN1 bias"), std::string::npos) << e.what();
  }
  // A good batch still runs after the errors.
  ctx->Run(ids.data(), nullptr, cu.data(), 1, &out);
  EXPECT_EQ(out.slots.size(), 4u);
}

}  // namespace
}  // namespace hotline::engine::cuda
