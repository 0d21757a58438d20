// cuBLASLt GEMMs with fused epilogues and per-shape algorithm tuning (see gemm.h).
#include "engine/cuda/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include <unistd.h>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/small_gemm.h"

namespace hotline::engine::cuda {

cudaDataType_t CudaType(DType t) {
  return t == DType::kF32 ? CUDA_R_32F : t == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
}

int AlgoConfig(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  int v = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return -1;
  return v;
}

std::string DescribeAlgo(const cublasLtMatmulAlgo_t& algo) {
  std::string d = "algo " + std::to_string(AlgoConfig(algo, CUBLASLT_ALGO_CONFIG_ID)) +
                  " tile " + std::to_string(AlgoConfig(algo, CUBLASLT_ALGO_CONFIG_TILE_ID)) +
                  " stages " + std::to_string(AlgoConfig(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID)) +
                  " splitk " + std::to_string(AlgoConfig(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
  const int option = AlgoConfig(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
            cluster = AlgoConfig(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
            swizzle = AlgoConfig(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
  if (option > 0 || cluster > 0 || swizzle > 0) {
    d += " option " + std::to_string(option) + " cluster " + std::to_string(cluster) +
         " swizzle " + std::to_string(swizzle);
  }
  return d;
}

int EpilogueActCode(GemmEpilogue e) {
  return e == GemmEpilogue::kBiasGelu       ? 1
         : e == GemmEpilogue::kBiasGeluTanh ? 2
         : e == GemmEpilogue::kBiasTanh     ? 3
                                            : 0;
}

namespace {

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1)); }

namespace {

bool PostActivation(GemmEpilogue e) {
  return e == GemmEpilogue::kBiasGelu || e == GemmEpilogue::kBiasTanh ||
         e == GemmEpilogue::kBiasGeluTanh;
}

std::string SmallDesc(int splits, bool fused) {
  return std::string(fused ? "small_splitk_fused " : "small_splitk ") + std::to_string(splits);
}

}  // namespace

const char* GemmEpilogueName(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone: return "none";
    case GemmEpilogue::kBias: return "bias";
    case GemmEpilogue::kBiasGelu: return "bias_gelu";
    case GemmEpilogue::kBiasGeluTanh: return "bias_gelu_tanh";
    case GemmEpilogue::kBiasTanh: return "bias_tanh";
  }
  return "?";
}

float TimeInGraph(const std::function<bool(cudaStream_t)>& enqueue, int iters, int reps) {
  cudaStream_t ts = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&ts, cudaStreamNonBlocking));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  float ms = -1.f;
  auto cleanup = [&] {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaStreamSynchronize(ts);
    cudaStreamDestroy(ts);
  };
  auto safe = [&](cudaStream_t st) {
    try {
      return enqueue(st);
    } catch (const Error&) {
      return false;
    }
  };
  try {
    bool ok = true;
    for (int w = 0; w < 2 && ok; ++w) ok = safe(ts);
    ok = ok && cudaStreamSynchronize(ts) == cudaSuccess;
    if (ok && cudaStreamBeginCapture(ts, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
      for (int i = 0; i < iters && ok; ++i) ok = safe(ts);
      const cudaError_t end = cudaStreamEndCapture(ts, &graph);
      ok = ok && end == cudaSuccess && graph &&
           cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
      if (ok) ok = cudaGraphLaunch(exec, ts) == cudaSuccess &&
                   cudaStreamSynchronize(ts) == cudaSuccess;
      if (ok) {
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        CUDA_CHECK(cudaEventRecord(e0, ts));
        for (int r = 0; r < reps; ++r) CUDA_CHECK(cudaGraphLaunch(exec, ts));
        CUDA_CHECK(cudaEventRecord(e1, ts));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float total = 0.f;
        CUDA_CHECK(cudaEventElapsedTime(&total, e0, e1));
        ms = total / float(reps * iters);
      }
    }
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  // A candidate that cannot run or be captured leaves a non-sticky error behind: clear it.
  if (ms < 0) cudaGetLastError();
  return ms;
}

LtWorkspace::LtWorkspace(size_t bytes) : bytes_(bytes) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  cudaError_t err = cudaSuccess;
  if (bytes_) err = cudaMalloc(&workspace_, bytes_);
  if (err == cudaSuccess) err = cudaMalloc(&counters_, kSmallGemmMaxTiles * sizeof(int));
  if (err == cudaSuccess) err = cudaMemset(counters_, 0, kSmallGemmMaxTiles * sizeof(int));
  if (err != cudaSuccess) {
    if (workspace_) cudaFree(workspace_);
    if (counters_) cudaFree(counters_);
    cublasLtDestroy(handle_);
    CUDA_CHECK(err);
  }
}

LtWorkspace::~LtWorkspace() {
  if (counters_) cudaFree(counters_);
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

bool GemmTuningCache::Find(const std::string& key, Entry* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  *out = it->second;
  return true;
}

void GemmTuningCache::Put(const std::string& key, const Entry& e) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_[key] = e;
  ++generation_;
}

uint64_t GemmTuningCache::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

size_t GemmTuningCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::map<std::string, GemmTuningCache::Entry> GemmTuningCache::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

std::string GemmTuningCache::Fingerprint() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  return std::string(p.name) + "|sm" + std::to_string(p.major * 10 + p.minor) + "|cublasLt " +
         std::to_string(cublasLtGetVersion());
}

bool GemmTuningCache::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return false;
  std::string header;
  std::getline(in, header);
  if (header != "hotline-gemm-cache 3 " + Fingerprint()) return false;
  std::map<std::string, Entry> loaded;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key, hex;
    Entry e;
    int fused = 0;
    if (!std::getline(ls, key, '\t') ||
        !(ls >> e.ms >> e.candidates >> e.small_splits >> fused >> e.small_kslice >> hex))
      continue;
    e.small_fused = fused != 0;
    if (hex.size() != sizeof(e.algo) * 2) continue;
    // By hand: a line that is not hex is skipped like any other malformed line (std::stoi
    // would throw out of the encoder's creation).
    auto nibble = [](char c) {
      return c >= '0' && c <= '9' ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    auto* bytes = reinterpret_cast<unsigned char*>(&e.algo);
    bool hex_ok = true;
    for (size_t k = 0; k < sizeof(e.algo) && hex_ok; ++k) {
      const int hi = nibble(hex[2 * k]), lo = nibble(hex[2 * k + 1]);
      hex_ok = hi >= 0 && lo >= 0;
      bytes[k] = static_cast<unsigned char>(hex_ok ? hi * 16 + lo : 0);
    }
    if (!hex_ok) continue;
    e.desc = e.small_kslice  ? "small_async k" + std::to_string(e.small_kslice)
             : e.small_splits ? SmallDesc(e.small_splits, e.small_fused)
                              : DescribeAlgo(e.algo);
    loaded[key] = e;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [k, e] : loaded) entries_[k] = e;
  ++generation_;
  return true;
}

void GemmTuningCache::Save(const std::string& path) const {
  // A name of this process and thread: two savers of one file never share the temporary (the
  // last rename wins, each file whole).
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp);
    if (!out) throw Error("cannot write GEMM timing cache " + tmp, Code::kPermissionDenied);
    out << "hotline-gemm-cache 3 " << Fingerprint() << "\n";
    for (const auto& [key, e] : Snapshot()) {
      out << key << '\t' << e.ms << ' ' << e.candidates << ' ' << e.small_splits << ' '
          << int(e.small_fused) << ' ' << e.small_kslice << ' ';
      const auto* bytes = reinterpret_cast<const unsigned char*>(&e.algo);
      char buf[3];
      for (size_t k = 0; k < sizeof(e.algo); ++k) {
        std::snprintf(buf, sizeof(buf), "%02x", bytes[k]);
        out << buf;
      }
      out << '\n';
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error("cannot rename GEMM timing cache to " + path, Code::kPermissionDenied);
  }
}

Gemm::Gemm(const float* weight_kn, int K, int N, const float* bias, GemmEpilogue epilogue,
           DType dtype, GemmTuningCache* cache, bool tune, int n_padded)
    : K_(K), N_(N), ldn_(std::max(N, n_padded)), epilogue_(epilogue), dtype_(dtype),
      cache_(cache), tune_(tune) {
  if (K <= 0 || N <= 0 || !weight_kn || !cache) {
    throw Error("cuda::Gemm: need K, N > 0, weights and a tuning cache, got K=" +
                std::to_string(K) + " N=" + std::to_string(N));
  }
  if (epilogue_ == GemmEpilogue::kNone && bias) epilogue_ = GemmEpilogue::kBias;
  const bool has_bias = epilogue_ != GemmEpilogue::kNone;
  const size_t es = DTypeSize(dtype);
  // Upload W [K, N] FP32, padded to [K, ldn] with zeros, then transpose-convert to [ldn, K].
  std::vector<float> host(size_t(K) * ldn_, 0.f);
  for (int k = 0; k < K; ++k)
    std::memcpy(&host[size_t(k) * ldn_], weight_kn + size_t(k) * N, size_t(N) * sizeof(float));
  try {
    CUDA_CHECK(cudaMalloc(&w_, size_t(ldn_) * K * es));
    {
      DeviceBuffer tmp(host.size() * sizeof(float));
      CUDA_CHECK(cudaMemcpy(tmp.p, host.data(), host.size() * sizeof(float),
                            cudaMemcpyHostToDevice));
      TransposeConvert(static_cast<float*>(tmp.p), K, ldn_, dtype, w_, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    if (has_bias) {
      std::vector<float> b(ldn_, 0.f);
      if (bias) std::memcpy(b.data(), bias, size_t(N) * sizeof(float));
      DeviceBuffer tmp(b.size() * sizeof(float));
      CUDA_CHECK(cudaMemcpy(tmp.p, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMalloc(&bias_, size_t(ldn_) * es));
      ConvertFromF32(static_cast<float*>(tmp.p), ldn_, dtype, bias_, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    for (int with_res = 0; with_res < 2; ++with_res) {
      cublasLtMatmulDesc_t d = nullptr;
      CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      (with_res ? desc_residual_ : desc_) = d;
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
      cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
      if (has_bias) {
        epi = epilogue_ == GemmEpilogue::kBiasGeluTanh ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                        : CUBLASLT_EPILOGUE_BIAS;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_,
                                                    sizeof(bias_)));
      }
      CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    }
  } catch (...) {
    if (desc_) cublasLtMatmulDescDestroy(desc_);
    if (desc_residual_) cublasLtMatmulDescDestroy(desc_residual_);
    if (w_) cudaFree(w_);
    if (bias_) cudaFree(bias_);
    throw;
  }
}

Gemm::~Gemm() {
  for (auto& [k, p] : prepared_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
  }
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  if (desc_residual_) cublasLtMatmulDescDestroy(desc_residual_);
  if (w_) cudaFree(w_);
  if (bias_) cudaFree(bias_);
}

size_t Gemm::weight_bytes() const {
  return (size_t(ldn_) * K_ + (bias_ ? ldn_ : 0)) * DTypeSize(dtype_);
}

std::string Gemm::Key(int M, bool with_residual) const {
  return std::to_string(M) + "x" + std::to_string(ldn_) + "x" + std::to_string(K_) + " " +
         DTypeName(dtype_) + " " + GemmEpilogueName(epilogue_) + (with_residual ? " +res" : "") +
         (tune_ ? " tuned" : " heuristic");
}

float Gemm::ChosenMs(int M, bool with_residual) const {
  GemmTuningCache::Entry e;
  const bool beta = with_residual && !PostActivation(epilogue_);
  return cache_->Find(Key(M, beta), &e) ? e.ms : -1.f;
}

std::string Gemm::ChoiceFor(int M, bool with_residual) const {
  GemmTuningCache::Entry e;
  const bool beta = with_residual && !PostActivation(epilogue_);
  if (!cache_->Find(Key(M, beta), &e)) return "(not prepared)";
  char buf[64];
  std::snprintf(buf, sizeof(buf), " %.4f ms of %d", e.ms, e.candidates);
  return e.desc + buf;
}

GemmTuningCache::Entry Gemm::Choose(int M, bool beta_one, LtWorkspace& ws, cudaStream_t stream) {
  const Prepared& p = prepared_.at({M, beta_one});
  cublasLtMatmulDesc_t desc = beta_one ? desc_residual_ : desc_;
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t wsb = ws.workspace_bytes();
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                       sizeof(wsb));
  cublasLtMatmulHeuristicResult_t res[16];
  int n = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ws.handle(), desc, p.a, p.b, p.c, p.c,
                                                           pref, 16, res, &n);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || n == 0) {
    throw Error("cuBLASLt has no algorithm for GEMM " + Key(M, beta_one) + " (status " +
                std::to_string(int(st)) + ")", Code::kUnimplemented);
  }
  GemmTuningCache::Entry best;
  best.algo = res[0].algo;
  best.desc = DescribeAlgo(res[0].algo);
  if (!tune_) return best;

  std::vector<cublasLtMatmulAlgo_t> cands;
  for (int i = 0; i < n; ++i) cands.push_back(res[i].algo);
  // Split-K variants of the heuristic's best few: they fill the GPU when M x N has few tiles.
  for (int i = 0; i < std::min(n, 4); ++i) {
    int support = 0;
    size_t written = 0;
    cublasLtMatmulAlgoCapGetAttribute(&res[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support,
                                      sizeof(support), &written);
    if (!support) continue;
    for (int split : {2, 3, 4, 6, 8, 12, 16}) {
      // Workspace reductions only: deterministic, unlike the in-place (atomic) scheme, so a
      // replayed graph reproduces its results bit for bit.
      for (uint32_t scheme : {uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE),
                              uint32_t(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)}) {
        cublasLtMatmulAlgo_t a = res[i].algo;
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split,
                                             sizeof(split));
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                             sizeof(scheme));
        cublasLtMatmulHeuristicResult_t chk{};
        if (cublasLtMatmulAlgoCheck(ws.handle(), desc, p.a, p.b, p.c, p.c, &a, &chk) ==
                CUBLAS_STATUS_SUCCESS &&
            chk.workspaceSize <= wsb) {
          cands.push_back(a);
          break;
        }
      }
    }
  }
  const size_t es = DTypeSize(dtype_);
  DeviceBuffer x(size_t(M) * K_ * es), y(size_t(M) * ldn_ * es), r(size_t(M) * ldn_ * es);
  FillRandom(dtype_, x.p, int64_t(M) * K_, 0x1234u, 1.f, stream);
  FillRandom(dtype_, r.p, int64_t(M) * ldn_, 0x5678u, 1.f, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));  // candidates run on TimeInGraph's own stream
  const float alpha = 1.f, beta = beta_one ? 1.f : 0.f;
  // Each candidate: the GEMM as Run would launch it (activation pass included), timed by graph
  // replays so that a GEMM of a few microseconds is not measured as its host launch cost.
  const int64_t ny = int64_t(M) * ldn_;
  auto post = [&](void* out, cudaStream_t st) {
    if (epilogue_ == GemmEpilogue::kBiasGelu)
      Activate(Activation::kGelu, dtype_, out, ny, out, st);
    if (epilogue_ == GemmEpilogue::kBiasTanh)
      Activate(Activation::kTanh, dtype_, out, ny, out, st);
  };
  for (const auto& a : cands) {
    const float ms = TimeInGraph([&](cudaStream_t st) {
      if (cublasLtMatmul(ws.handle(), desc, &alpha, w_, p.a, x.p, p.b, &beta, r.p, p.c, y.p, p.c,
                         &a, ws.workspace(), wsb, st) != CUBLAS_STATUS_SUCCESS)
        return false;
      post(y.p, st);
      return true;
    });
    if (ms < 0) continue;
    ++best.candidates;
    if (best.ms < 0 || ms < best.ms) {
      best.ms = ms;
      best.algo = a;
    }
  }
  best.desc = DescribeAlgo(best.algo);
  if (SmallGemmEligible(dtype_, M, K_, ldn_)) {
    // Our split-K kernel competes too, but only after matching cuBLASLt's best on this data.
    auto download = [&](const void* dev) {
      DeviceBuffer f(size_t(M) * ldn_ * sizeof(float));
      ConvertToF32(dev, dtype_, int64_t(M) * ldn_, static_cast<float*>(f.p), stream);
      std::vector<float> h(size_t(M) * ldn_);
      CUDA_CHECK(cudaMemcpyAsync(h.data(), f.p, h.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                 stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      return h;
    };
    CUBLAS_CHECK(cublasLtMatmul(ws.handle(), desc, &alpha, w_, p.a, x.p, p.b, &beta, r.p, p.c,
                                y.p, p.c, &best.algo, ws.workspace(), wsb, stream));
    post(y.p, stream);
    const std::vector<float> want = download(y.p);
    DeviceBuffer y2(size_t(M) * ldn_ * es);
    for (int splits : SmallGemmSplits(K_)) {
      if (SmallGemmWorkspaceBytes(ldn_, splits) > wsb) continue;
      for (bool fused : {false, true}) {
        auto run = [&](cudaStream_t st) {
          SmallGemm(dtype_, x.p, M, K_, w_, ldn_, bias_, epilogue_, beta_one ? r.p : nullptr,
                    y2.p, splits, fused, ws.workspace(), ws.counters(), st);
          return true;
        };
        CUDA_CHECK(cudaMemsetAsync(y2.p, 0xff, size_t(M) * ldn_ * es, stream));  // poison: NaN
        run(stream);
        // Twice: the fused reduction must also be right on a second launch (counter reset).
        if (fused) run(stream);
        const std::vector<float> got = download(y2.p);
        double num = 0, den = 0;
        bool finite = true;
        for (size_t i = 0; i < got.size(); ++i) {
          finite = finite && std::isfinite(got[i]);
          num += double(got[i] - want[i]) * (got[i] - want[i]);
          den += double(want[i]) * want[i];
        }
        if (!finite || num > 1e-4 * den) continue;  // relative error above 1e-2: rejected
        const float ms = TimeInGraph(run);
        if (ms < 0) continue;
        ++best.candidates;
        if (best.ms < 0 || ms < best.ms) {
          best.ms = ms;
          best.small_splits = splits;
          best.small_fused = fused;
          best.small_kslice = 0;
          best.desc = SmallDesc(splits, fused);
        }
      }
    }
    for (int kslice : SmallGemmAsyncSlices(K_)) {
      if (SmallGemmWorkspaceBytes(ldn_, K_ / kslice) > wsb) continue;
      auto run = [&](cudaStream_t st) {
        SmallGemmAsync(dtype_, x.p, M, K_, w_, ldn_, bias_, epilogue_, beta_one ? r.p : nullptr,
                       y2.p, kslice, ws.workspace(), ws.counters(), st);
        return true;
      };
      CUDA_CHECK(cudaMemsetAsync(y2.p, 0xff, size_t(M) * ldn_ * es, stream));
      run(stream);
      run(stream);
      const std::vector<float> got = download(y2.p);
      double num = 0, den = 0;
      bool finite = true;
      for (size_t i = 0; i < got.size(); ++i) {
        finite = finite && std::isfinite(got[i]);
        num += double(got[i] - want[i]) * (got[i] - want[i]);
        den += double(want[i]) * want[i];
      }
      if (!finite || num > 1e-4 * den) continue;
      const float ms = TimeInGraph(run);
      if (ms < 0) continue;
      ++best.candidates;
      if (best.ms < 0 || ms < best.ms) {
        best.ms = ms;
        best.small_splits = K_ / kslice;
        best.small_fused = true;
        best.small_kslice = kslice;
        best.desc = "small_async k" + std::to_string(kslice);
      }
    }
  }
  CUDA_CHECK(cudaGetLastError());
  return best;
}

void Gemm::Prepare(int M, bool with_residual, LtWorkspace& ws, cudaStream_t stream) {
  if (M <= 0) throw Error("cuda::Gemm: M must be > 0, got " + std::to_string(M));
  const bool beta_one = with_residual && !PostActivation(epilogue_);
  std::lock_guard<std::mutex> lock(mu_);
  if (prepared_.count({M, beta_one})) return;
  Prepared p;
  const cudaDataType_t t = CudaType(dtype_);
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, t, K_, ldn_, K_));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, t, K_, M, K_));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, t, ldn_, M, ldn_));
  prepared_[{M, beta_one}] = p;
  GemmTuningCache::Entry e;
  const std::string key = Key(M, beta_one);
  try {
    if (!cache_->Find(key, &e)) {
      e = Choose(M, beta_one, ws, stream);
      cache_->Put(key, e);
    }
  } catch (...) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    prepared_.erase({M, beta_one});
    throw;
  }
  prepared_[{M, beta_one}].algo = e.algo;
  prepared_[{M, beta_one}].small_splits = e.small_splits;
  prepared_[{M, beta_one}].small_fused = e.small_fused;
  prepared_[{M, beta_one}].small_kslice = e.small_kslice;
}

void Gemm::Run(const void* x, int M, void* y, const void* residual, LtWorkspace& ws,
               cudaStream_t stream) {
  if (M == 0) return;
  if (!x || !y) throw Error("cuda::Gemm::Run: null x or y");
  const bool post = PostActivation(epilogue_);
  const bool beta_one = residual && !post;
  if (residual && post && residual == y) {
    // The activation would overwrite the residual before it is added: needs its own output.
    throw Error(std::string("cuda::Gemm::Run: a residual after the ") +
                GemmEpilogueName(epilogue_) + " epilogue cannot alias the output",
                Code::kUnimplemented);
  }
  Prepared p;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = prepared_.find({M, beta_one});
    if (it == prepared_.end()) {
      lock.unlock();
      Prepare(M, residual != nullptr, ws, stream);
      lock.lock();
      it = prepared_.find({M, beta_one});
    }
    p = it->second;
  }
  if (p.small_kslice > 0) {
    SmallGemmAsync(dtype_, x, M, K_, w_, ldn_, bias_, epilogue_, residual, y, p.small_kslice,
                   ws.workspace(), ws.counters(), stream);
    return;
  }
  if (p.small_splits > 0) {  // bias, activation and residual all in its reduction kernel
    SmallGemm(dtype_, x, M, K_, w_, ldn_, bias_, epilogue_, residual, y, p.small_splits,
              p.small_fused, ws.workspace(), ws.counters(), stream);
    return;
  }
  const float alpha = 1.f, beta = beta_one ? 1.f : 0.f;
  const void* c = beta_one ? residual : y;
  CUBLAS_CHECK(cublasLtMatmul(ws.handle(), beta_one ? desc_residual_ : desc_, &alpha, w_, p.a, x,
                              p.b, &beta, c, p.c, y, p.c, &p.algo, ws.workspace(),
                              ws.workspace_bytes(), stream));
  const int64_t n = int64_t(M) * ldn_;
  if (epilogue_ == GemmEpilogue::kBiasGelu) Activate(Activation::kGelu, dtype_, y, n, y, stream);
  if (epilogue_ == GemmEpilogue::kBiasTanh) Activate(Activation::kTanh, dtype_, y, n, y, stream);
  if (residual && post) AddInPlace(dtype_, y, residual, n, stream);
}

}  // namespace hotline::engine::cuda
