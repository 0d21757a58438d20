// Internal to the engine: the INT8 steps of the plan builder (calib.cc).
#pragma once

#include <string>
#include <vector>

#include "engine/plan.h"
#include "engine/quant.h"

namespace hotline::engine {

// The quantisable GEMMs of a packed fp32 plan, in execution order.
std::vector<QuantGemm> GemmsOfPlan(const PlanData& plan);

// Runs the packed fp32 plan over the sequences and returns per-tensor ranges of every GEMM input.
CalibrationTable CalibratePlan(const PlanData& fp32_plan,
                               const std::vector<std::vector<int32_t>>& sequences,
                               CalibMethod method, double percentile);

// The table an INT8 build uses (BuildOptions order: calib_table, calib_cache, calibration);
// writes the cache after a fresh calibration. `model_fingerprint` is ModelFingerprint(imported).
CalibrationTable ObtainCalibration(const PlanData& fp32_plan, const std::string& model_fingerprint,
                                   const BuildOptions& options);

// Rewrites a packed fp32 plan into an INT8 plan: s8 weights with per-channel scales for every GEMM
// not kept, the s8 word table (unless keep_embeddings), the s8 copies of GEMM inputs written by
// their producers where those can (LayerNorm family, int8 GELU Dense), op precisions, and a record
// in plan->extra["int8"]. weight_qmax: 127, or 63 on CPUs without VNNI (cpu::S8WeightQmax).
void ApplyInt8(PlanData* plan, const CalibrationTable& table, const std::vector<bool>& keep,
               bool keep_embeddings, int weight_qmax);

// The whole INT8 step of BuildPlanData: calibration table, keep-fp resolution, ApplyInt8.
void QuantizePlanInt8(PlanData* plan, const std::string& model_fingerprint,
                      const BuildOptions& options);

// The INT8 step of BuildPlanData for the CUDA backend, whose whole-encoder runner quantises the
// weights itself (encoder_quant.h): the plan keeps its fp32 graph, and the activation range of
// each quantised GEMM input is taken from the build's calibration table (ObtainCalibration:
// table, cache, or a calibration pass with the build's method over the fp32 plan on the CPU),
// per encoder layer in the encoder's order qkv, attn_out, ffn_in, ffn_out. Records
// plan->extra["int8"]: the table's provenance (method, percentile, samples, calib_source,
// model_fingerprint), "target": "cuda_encoder", "act_amax" ([layers * 4]) and "gemms". Throws
// when keep_fp (the user's or a QDQ model's) keeps an encoder GEMM or the word embeddings in
// float (that encoder quantises all of them), or the GEMMs do not form layers of four.
void RecordEncoderInt8Ranges(PlanData* plan, const std::string& model_fingerprint,
                             const BuildOptions& options);

// plan.extra["int8"]["act_amax"] of a CUDA INT8 plan (RecordEncoderInt8Ranges); empty when the
// plan has none. Throws on a malformed record (not an array of positive finite numbers).
std::vector<float> EncoderInt8ActAmax(const PlanData& plan);

}  // namespace hotline::engine
