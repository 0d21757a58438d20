// GPU memory of quantised CUDA encoders (PERFORMANCE.md G5, issue #7):
//   - AttentionQuant over per-head interleaved QKV, whole and in head groups (out_ld), equal
//     byte for byte to the standard layout;
//   - the INT8 word table: EmbeddingLayerNormInt8Word against the CPU embedding + LayerNorm over
//     the same table dequantised on the host (row scale * int8), both kernel variants, every
//     activation type, padding rows finite;
//   - head groups (quant_qkv_group_tokens) and FFN row chunks (quant_ffn_chunk_rows) at test
//     sizes: the same outputs as with both off — bit-identical for INT8 (int32 accumulation is
//     exact and every output column is computed from the same bytes), within a small bound for
//     FP8 (cuBLASLt may choose another algorithm, hence another FP32 summation order, for the
//     smaller row counts / narrower GEMMs) — and both within the established quantisation bounds
//     of the FP32 reference; grouping chosen as the option's rule says;
//   - device_bytes() of a BERT-base FP8/INT8 context at 128 x 128 from the buffer formula, and
//     the G5 goal (weights + one context <= 200 MiB) for FP8.
// Skips loudly when no CUDA device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/cuda/encoder_quant.h"
#include "tests/engine/cuda/quant_reference.h"
#include "tests/engine/cuda/quant_test_util.h"
#include "tests/engine/cuda/test_util.h"

namespace hotline::engine::cuda {
namespace {

TEST(CudaEncoderMemory, Int8WordEmbeddingMatchesCpuOnTheDequantisedTable) {
  if (!test::HaveGpu("encoder memory")) GTEST_SKIP() << "no CUDA device: not tested";
  std::mt19937_64 rng(test::Seed() + 71);
  const int vocab = 300, max_pos = 160, type_vocab = 2;
  for (int variant : {0, 1}) {
    ScopedKernelVariants scope(variant);
    for (DType t : test::AllTypes()) {
      for (int H : {768, 100, 64}) {
        SCOPED_TRACE(std::string(DTypeName(t)) + " H=" + std::to_string(H) + " layernorm v" +
                     std::to_string(variant));
        std::vector<float> word = test::RandomVec(rng, size_t(vocab) * H, -0.2f, 0.2f);
        for (int i = 0; i < H; ++i) word[i] = 0.f;           // row 0: all zero (scale 1)
        word[size_t(7) * H + 3] = 3.5f;                      // row 7: one large value
        // The INT8 table and its scales, built here by the rule (max |row| / 127, nearest).
        std::vector<int8_t> q(word.size());
        std::vector<float> sc(vocab);
        for (int r = 0; r < vocab; ++r) {
          float m = 0.f;
          for (int i = 0; i < H; ++i) m = std::max(m, std::fabs(word[size_t(r) * H + i]));
          sc[r] = m > 0.f ? m / 127.f : 1.f;
          for (int i = 0; i < H; ++i) {
            q[size_t(r) * H + i] = int8_t(std::lrint(word[size_t(r) * H + i] / sc[r]));
          }
        }
        std::vector<float> deq(word.size());
        for (size_t i = 0; i < q.size(); ++i) deq[i] = sc[i / H] * float(q[i]);
        // The reference's own table and dequantisation (used by the encoder simulation and
        // the other tests) agree with this construction by the rule.
        const ref::Int8WordTable rt = ref::QuantiseWordRows(word, H);
        ASSERT_EQ(rt.codes, q);
        ASSERT_EQ(rt.scales, sc);
        ASSERT_EQ(ref::QDQWordRows(word, H), deq);
        std::vector<float> pos = test::RandomVec(rng, size_t(max_pos) * H, -0.1f, 0.1f);
        std::vector<float> type = test::RandomVec(rng, size_t(type_vocab) * H, -0.1f, 0.1f);
        std::vector<float> g = test::RandomVec(rng, H, 0.5f, 1.5f);
        std::vector<float> b = test::RandomVec(rng, H, -0.5f, 0.5f);
        const std::vector<int32_t> cu = test::RandomCu(rng, 5, 128);
        const int T = cu.back(), rows = T + 11;  // 11 bucket-padding rows
        std::vector<int32_t> ids(T), types(T);
        for (int i = 0; i < T; ++i) {
          ids[i] = int32_t(rng() % vocab);
          types[i] = int32_t(rng() % 2);
        }
        ids[0] = 0;
        ids[1] = 7;
        auto dpos = test::Upload(t, pos);  // pos/type now hold the device's rounded values
        auto dtype = test::Upload(t, type);
        auto dq = test::UploadRaw(q);
        auto dsc = test::UploadF32(sc);
        auto dg = test::UploadF32(g);
        auto db = test::UploadF32(b);
        auto dids = test::UploadRaw(ids);
        auto dtypes = test::UploadRaw(types);
        auto dcu = test::UploadRaw(cu);
        test::DevBuf y(size_t(rows) * H * DTypeSize(t));
        EmbeddingLayerNormInt8Word(t, dids->as<int32_t>(), dtypes->as<int32_t>(),
                                   dcu->as<int32_t>(), 5, rows, dq->get(), dsc->as<float>(), vocab,
                                   dpos->get(), max_pos, dtype->get(), type_vocab, dg->as<float>(),
                                   db->as<float>(), 1e-12f, H, y.get(), nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = test::Download(t, y.get(), size_t(rows) * H);
        std::vector<float> want(size_t(T) * H);
        ref::Embed(ids.data(), types.data(), cu.data(), 5, deq.data(), pos.data(), type.data(),
                   g.data(), b.data(), 1e-12f, H, want.data());
        const std::vector<float> real(got.begin(), got.begin() + want.size());
        EXPECT_LE(ref::RelErr(real, want), test::Tol(t));
        for (size_t i = want.size(); i < got.size(); ++i) ASSERT_TRUE(std::isfinite(got[i]));
        // Without scales: refused before any launch.
        EXPECT_THROW(EmbeddingLayerNormInt8Word(t, dids->as<int32_t>(), nullptr,
                                                dcu->as<int32_t>(), 5, rows, dq->get(), nullptr,
                                                vocab, dpos->get(), max_pos, dtype->get(),
                                                type_vocab, dg->as<float>(), db->as<float>(),
                                                1e-12f, H, y.get(), nullptr),
                     Error);
      }
    }
  }
}

// AttentionQuant over per-head interleaved QKV ([Q_h K_h V_h] per head), whole or in head groups
// writing their columns of a [T, H] context (out_ld = H), against AttentionQuant over the same
// values in the standard Q | K | V layout: the same kernel arithmetic per (row, head), so every
// byte equal; rows outside every sequence keep their contents.
TEST(CudaEncoderMemory, InterleavedGroupedAttentionQuantEqualsTheStandardLayout) {
  if (!test::HaveGpu("encoder memory")) GTEST_SKIP() << "no CUDA device: not tested";
  std::mt19937_64 rng(test::Seed() + 74);
  for (QuantType q : {QuantType::kFp8E4M3, QuantType::kInt8}) {
    for (DType t : {DType::kF16, DType::kBF16}) {
      for (int D : {32, 64, 128}) {
        const int heads = D == 64 ? 12 : 4, H = heads * D, batch = 9;
        SCOPED_TRACE(std::string(QuantTypeName(q)) + " " + DTypeName(t) + " D=" +
                     std::to_string(D));
        if (!AttentionQuantSupported(t, D)) GTEST_SKIP() << "attention variant is not 1";
        const std::vector<int32_t> cu = test::RandomCu(rng, batch, 130);
        const int T = cu.back(), rows = T + 5;  // 5 rows outside every sequence
        std::vector<float> qkv = test::RandomVec(rng, size_t(rows) * 3 * H, -2.f, 2.f);
        auto dstd = test::Upload(t, qkv);  // qkv now holds the rounded values
        std::vector<float> il(qkv.size());  // the same values, interleaved per head
        for (int r = 0; r < rows; ++r) {
          for (int c = 0; c < 3 * H; ++c) {
            const int p = c / H, h = (c % H) / D, d = c % D;
            il[size_t(r) * 3 * H + h * 3 * D + p * D + d] = qkv[size_t(r) * 3 * H + c];
          }
        }
        auto dil = test::Upload(t, il);
        auto dcu = test::UploadRaw(cu);
        const float scale = 1.f / std::sqrt(float(D));
        const float os = 1.f / QuantMax(q) * (q == QuantType::kInt8 ? 1.f : 2.f);
        const int max_seqlen = 192;
        auto run = [&](auto&& launch) {
          test::DevBuf out(size_t(rows) * H);
          CUDA_CHECK(cudaMemset(out.get(), 0x5A, out.bytes()));
          launch(out.get());
          CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<uint8_t> h(out.bytes());
          CUDA_CHECK(cudaMemcpy(h.data(), out.get(), h.size(), cudaMemcpyDeviceToHost));
          return h;
        };
        const std::vector<uint8_t> want = run([&](void* o) {
          AttentionQuant(t, dstd->get(), dcu->as<int32_t>(), batch, max_seqlen, heads, D, scale,
                         os, q, o, nullptr);
        });
        int nonzero = 0;
        for (size_t i = 0; i < size_t(T) * H; ++i) nonzero += want[i] != 0 && want[i] != 0x5A;
        EXPECT_GT(nonzero, T * H / 2);  // the output is really there
        for (size_t i = size_t(T) * H; i < want.size(); ++i) ASSERT_EQ(want[i], 0x5A);
        EXPECT_EQ(run([&](void* o) {
                    AttentionQuant(t, dil->get(), dcu->as<int32_t>(), batch, max_seqlen, heads, D,
                                   scale, os, q, o, nullptr, true);
                  }),
                  want);
        for (int G : {2, heads}) {
          SCOPED_TRACE("groups " + std::to_string(G));
          const int hg = heads / G, gw = 3 * hg * D;
          // Group g's QKV: its heads' interleaved columns, [rows, 3H/G].
          std::vector<std::unique_ptr<test::DevBuf>> parts;
          for (int g = 0; g < G; ++g) {
            std::vector<float> part(size_t(rows) * gw);
            for (int r = 0; r < rows; ++r) {
              std::copy(il.begin() + size_t(r) * 3 * H + size_t(g) * gw,
                        il.begin() + size_t(r) * 3 * H + size_t(g + 1) * gw,
                        part.begin() + size_t(r) * gw);
            }
            parts.push_back(test::Upload(t, part));
          }
          EXPECT_EQ(run([&](void* o) {
                      for (int g = 0; g < G; ++g) {
                        AttentionQuant(t, parts[g]->get(), dcu->as<int32_t>(), batch, max_seqlen,
                                       hg, D, scale, os, q,
                                       static_cast<char*>(o) + size_t(g) * hg * D, nullptr, true,
                                       H);
                      }
                    }),
                    want);
        }
        EXPECT_THROW(AttentionQuant(t, dil->get(), dcu->as<int32_t>(), batch, max_seqlen, heads,
                                    D, scale, os, q, dil->get(), nullptr, true, H - 2),
                     Error);
      }
    }
  }
}

TEST(CudaEncoderMemory, HeadGroupsAndFfnChunksKeepTheOutputs) {
  if (!test::HaveGpu("encoder memory")) GTEST_SKIP() << "no CUDA device: not tested";
  std::mt19937_64 rng(test::Seed() + 72);
  const EncoderConfig c = test::SmallQuantConfig();
  const EncoderWeights w = EncoderWeights::Random(c, rng());
  EncoderOptions base;
  base.dtype = DType::kF16;
  base.max_batch = 16;
  base.max_seq = 128;
  const std::vector<float> amax =
      CalibrateEncoderAmax(c, w, base, RandomEncoderBatches(c, 2, 8, 128, rng()));
  // Buckets: 320 (298 tokens, lengths 1..128, padded), 64 (57 tokens), 32 (25 tokens).
  const std::vector<EncoderBatch> batches = {
      test::RandomBatch(rng, c, {0, 1, 8, 72, 137, 265, 298}),
      test::RandomBatch(rng, c, {0, 30, 57}), test::RandomBatch(rng, c, {0, 5, 25})};
  for (EncoderQuant eq : {EncoderQuant::kInt8, EncoderQuant::kFp8}) {
    const QuantType q = ToQuantType(eq);
    SCOPED_TRACE(EncoderQuantName(eq));
    if (!QuantTypeSupported(q)) {
      std::printf("%s not supported on this GPU: skipped here (encoder_quant_test checks the "
                  "refusal)\n", EncoderQuantName(eq));
      continue;
    }
    EncoderOptions o = base;
    o.quant = eq;
    o.act_scales = ScalesFromAmax(amax, eq);
    o.quant_ffn_chunk_rows = 0;
    o.quant_qkv_group_tokens = 0;
    auto plain = CudaEncoder::Create(c, w, o);
    o.quant_ffn_chunk_rows = 32;
    o.quant_qkv_group_tokens = 48;
    auto split = CudaEncoder::Create(c, w, o);
    EXPECT_FALSE(plain->qkv_interleaved());
    ASSERT_TRUE(split->qkv_interleaved());
    // The rule: smallest G (dividing 4 heads, width 3 * 64 * 4 / G a multiple of 16) with
    // Tb * (3H/G * 2 + H) <= 48 * 3H * 2 = 73728 bytes; else the largest G.
    //   Tb 320: G 2 -> 327680, G 4 -> 204800: neither fits: 4. Tb 64: G 2 -> 65536: 2.
    EXPECT_EQ(split->QkvGroups(320), 4);
    EXPECT_EQ(split->QkvGroups(64), 2);
    EXPECT_EQ(split->QkvGroups(48), 1);
    EXPECT_EQ(split->QkvGroups(32), 1);
    EXPECT_EQ(plain->QkvGroups(320), 1);
    EXPECT_EQ(split->FfnChunkRows(320), 32);
    EXPECT_EQ(split->FfnChunkRows(32), 32);
    EXPECT_EQ(plain->FfnChunkRows(320), 320);
    // The views share the weights: the same device weight bytes either way.
    EXPECT_EQ(split->weight_bytes(), plain->weight_bytes());
    auto cp = plain->CreateContext();
    auto cs = split->CreateContext();
    for (const EncoderBatch& b : batches) {
      const int nb = int(b.cu.size()) - 1;
      SCOPED_TRACE("batch of " + std::to_string(b.cu.back()) + " tokens");
      EncoderOutputs a, d, again;
      cp->Run(b.ids.data(), b.types.data(), b.cu.data(), nb, &a);
      cs->Run(b.ids.data(), b.types.data(), b.cu.data(), nb, &d);
      cs->Run(b.ids.data(), b.types.data(), b.cu.data(), nb, &again);  // graph replay
      EXPECT_EQ(d.slot_logits, again.slot_logits);
      const ref::EncoderResult full =
          ref::QuantEncoder(c, w, {}, QuantType::kInt8, false, b.ids, b.types, b.cu, nullptr);
      const double ds = ref::RelErr(d.slot_logits, a.slot_logits);
      const double di = ref::RelErr(d.intent_logits, a.intent_logits);
      std::printf("%s %d tokens: groups/chunks vs plain: slot %.3g intent %.3g (%s); vs fp32: "
                  "%.4f %.4f\n", EncoderQuantName(eq), b.cu.back(), ds, di,
                  d.slot_logits == a.slot_logits ? "identical" : "differ",
                  ref::RelErr(d.slot_logits, full.slot_logits),
                  ref::RelErr(d.intent_logits, full.intent_logits));
      if (eq == EncoderQuant::kInt8) {
        EXPECT_EQ(d.slot_logits, a.slot_logits);
        EXPECT_EQ(d.intent_logits, a.intent_logits);
        EXPECT_EQ(d.slots, a.slots);
      } else {
        // A different FP32 summation order moves a GEMM output by about an FP16 ulp; some of
        // those values cross an E4M3 rounding boundary downstream (one step, up to 2^-3
        // relative, each): half the bound against the exact simulation (0.08,
        // encoder_quant_test), while a wrong group layout, view offset or chunk offset moves the
        // logits by O(1).
        EXPECT_LE(ds, 0.04);
        EXPECT_LE(di, 0.04);
      }
      const double bound = eq == EncoderQuant::kFp8 ? 0.15 : 0.06;
      EXPECT_LE(ref::RelErr(d.slot_logits, full.slot_logits), bound);
      EXPECT_LE(ref::RelErr(d.intent_logits, full.intent_logits), bound);
    }
  }
  EncoderOptions bad = base;
  bad.quant_ffn_chunk_rows = -1;
  EXPECT_THROW(CudaEncoder::Create(c, w, bad), Error);
}

// BERT-base at 128 x 128 (16384 tokens), defaults (FFN chunks of 4096, head groups above 8192
// tokens): the activation buffer holds max(ungrouped 8192-token QKV [8192, 3H] fp16, FFN chunk
// [4096, I] fp16 + [4096, I] 8-bit, 16384 tokens in 3 groups [16384, H] fp16 + [16384, H] 8-bit)
// = 8192 * 2304 * 2 = 36 MiB instead of the FP16 encoder's [16384, 4H] fp16 = 96 MiB, and the
// quantised context adds only the 8-bit GEMM input [16384, H] (FP8: no scratch).
TEST(CudaEncoderMemory, BaseContextAt128x128FollowsTheBufferFormula) {
  if (!test::HaveGpu("encoder memory")) GTEST_SKIP() << "no CUDA device: not tested";
  std::mt19937_64 rng(test::Seed() + 73);
  const EncoderConfig c;  // BERT-base: 12 layers, H 768, 12 heads, I 3072, vocab 21128
  const EncoderWeights w = EncoderWeights::Random(c, rng());
  EncoderOptions o;
  o.dtype = DType::kF16;
  o.max_batch = 128;
  o.max_seq = 128;
  o.tune = false;
  auto f16 = CudaEncoder::Create(c, w, o);
  const size_t f16_ctx = f16->CreateContext()->device_bytes();
  const size_t T = 16384, H = 768, I = 3072, es = 2;
  const size_t f16_u = T * 4 * H * es;
  for (EncoderQuant eq : {EncoderQuant::kFp8, EncoderQuant::kInt8}) {
    const QuantType q = ToQuantType(eq);
    SCOPED_TRACE(EncoderQuantName(eq));
    if (!QuantTypeSupported(q)) continue;
    EncoderOptions oq = o;
    oq.quant = eq;
    oq.act_scales.assign(size_t(c.layers) * 4, 0.05f);
    auto enc = CudaEncoder::Create(c, w, oq);
    auto ctx = enc->CreateContext();
    EXPECT_TRUE(enc->qkv_interleaved());
    EXPECT_EQ(enc->QkvGroups(16384), 3);  // G 2: 16384 * (1152 * 2 + 768) > 8192 * 2304 * 2
    EXPECT_EQ(enc->QkvGroups(8192), 1);
    const size_t u = 8192 * 3 * H * es;
    EXPECT_EQ(u, 4096 * I * es + 4096 * I);          // the FFN chunk needs the same
    EXPECT_EQ(u, 16384 * H * es + 16384 * H);        // and so do 3 groups at 16384
    EXPECT_EQ(ctx->activation_union_bytes(), u);
    const size_t want = f16_ctx - f16_u + u + T * H;  // + the 8-bit GEMM input
    EXPECT_EQ(ctx->device_bytes(), want);
    // A full-size run; FP8 (fused cuBLASLt scaling) allocates nothing more; INT8 adds its int32
    // scratch, the largest GEMM call: quant_chunk_rows (512) rows of the widest GEMM, FFN1's I.
    std::vector<int32_t> ids(T, 101), cu(129);
    for (int i = 0; i <= 128; ++i) cu[i] = i * 128;
    EncoderOutputs out;
    ctx->Run(ids.data(), nullptr, cu.data(), 128, &out);
    for (const auto& p : enc->QuantPaths(16384)) std::printf("  %s\n", p.c_str());
    ASSERT_EQ(oq.quant_chunk_rows, 512);
    const size_t acc = eq == EncoderQuant::kInt8 ? size_t(512) * I * 4 : 0;
    EXPECT_EQ(ctx->device_bytes(), want + acc);
    const double wm = enc->weight_bytes() / 1048576.0, cm = ctx->device_bytes() / 1048576.0;
    std::printf("%s BERT-base 128x128: weights %.1f MiB + context %.1f MiB = %.1f MiB (fp16: "
                "%.1f + %.1f)\n", EncoderQuantName(eq), wm, cm, wm + cm,
                f16->weight_bytes() / 1048576.0, f16_ctx / 1048576.0);
    // The INT8 word table: V x H bytes + V FP32 scales instead of V x H fp16, on top of the
    // 8-bit GEMM weights (the FP16 encoder's other tables and heads are the same).
    const size_t V = c.vocab;
    EXPECT_LE(enc->weight_bytes() + V * H * es - (V * H + V * 4), f16->weight_bytes());
    EXPECT_LE(wm + cm, 200.0) << "PERFORMANCE.md G5 (INT8 and FP8)";
  }
}

}  // namespace
}  // namespace hotline::engine::cuda
