// Small public types of engine.h: names, profiles, packed batches, tensors.
#include "engine/engine.h"

#include <algorithm>
#include <charconv>

#include "base/error.h"

namespace hotline::engine {

std::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFP32: return "fp32";
    case Precision::kFP16: return "fp16";
    case Precision::kBF16: return "bf16";
    case Precision::kINT8: return "int8";
    case Precision::kFP8: return "fp8";
  }
  return "?";
}

Precision ParsePrecision(std::string_view name) {
  for (Precision p : {Precision::kFP32, Precision::kFP16, Precision::kBF16, Precision::kINT8,
                      Precision::kFP8}) {
    if (PrecisionName(p) == name) return p;
  }
  throw Error("unknown precision '" + std::string(name) + "' (expected fp32, fp16, bf16, int8 or "
              "fp8)");
}

std::string_view BackendName(BackendKind b) { return b == BackendKind::kCPU ? "cpu" : "cuda"; }

BackendKind ParseBackend(std::string_view name) {
  if (name == "cpu") return BackendKind::kCPU;
  if (name == "cuda") return BackendKind::kCUDA;
  throw Error("unknown backend '" + std::string(name) + "' (expected cpu or cuda)");
}

namespace {

int ParseInt(std::string_view s, std::string_view spec) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v <= 0) {
    throw Error("bad profile '" + std::string(spec) + "': '" + std::string(s) +
                "' is not a positive integer (expected min:opt:max as BxS, e.g. 1x1:8x64:64x128)");
  }
  return v;
}

}  // namespace

Profile Profile::Parse(std::string_view spec) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t k = 0; k <= spec.size(); ++k) {
    if (k == spec.size() || spec[k] == ':') {
      parts.push_back(spec.substr(start, k - start));
      start = k + 1;
    }
  }
  if (parts.size() != 3) {
    throw Error("bad profile '" + std::string(spec) + "': expected min:opt:max as BxS, e.g. "
                "1x1:8x64:64x128");
  }
  int v[6];
  for (int k = 0; k < 3; ++k) {
    const size_t x = parts[k].find('x');
    if (x == std::string_view::npos) {
      throw Error("bad profile '" + std::string(spec) + "': '" + std::string(parts[k]) +
                  "' is not BxS");
    }
    v[2 * k] = ParseInt(parts[k].substr(0, x), spec);
    v[2 * k + 1] = ParseInt(parts[k].substr(x + 1), spec);
  }
  Profile p{v[0], v[1], v[2], v[3], v[4], v[5]};
  if (!(p.min_batch <= p.opt_batch && p.opt_batch <= p.max_batch && p.min_seq <= p.opt_seq &&
        p.opt_seq <= p.max_seq)) {
    throw Error("bad profile '" + std::string(spec) + "': needs min <= opt <= max in batch and "
                "sequence");
  }
  return p;
}

std::string Profile::ToString() const {
  auto bs = [](int b, int s) { return std::to_string(b) + "x" + std::to_string(s); };
  return bs(min_batch, min_seq) + ":" + bs(opt_batch, opt_seq) + ":" + bs(max_batch, max_seq);
}

void Profile::Check(int batch, int max_seqlen) const {
  if (batch < min_batch || batch > max_batch) {
    throw Error("batch " + std::to_string(batch) + " is outside the plan's profile: batch must be "
                "in [" + std::to_string(min_batch) + ", " + std::to_string(max_batch) +
                "] (profile " + ToString() + ")", Code::kOutOfRange);
  }
  if (max_seqlen < min_seq || max_seqlen > max_seq) {
    throw Error("sequence length " + std::to_string(max_seqlen) + " is outside the plan's "
                "profile: seq must be in [" + std::to_string(min_seq) + ", " +
                std::to_string(max_seq) + "] (profile " + ToString() + ")", Code::kOutOfRange);
  }
}

int PackedBatch::max_seqlen() const {
  int m = 0;
  for (size_t k = 1; k < cu_seqlens.size(); ++k) {
    m = std::max(m, cu_seqlens[k] - cu_seqlens[k - 1]);
  }
  return m;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace hotline::engine
