// Does a cuBLASLt GEMM honour programmatic dependent launch? And how far is the heuristic's
// choice from the best configuration? (issue #7, G3; PERF_NOTES session 7)
//
// Between two dependent kernels of a CUDA graph the GPU drains the first before it schedules the
// second. Programmatic dependent launch (PDL, sm_90) lets the second be scheduled early, but only
// a kernel that executes griddepcontrol.wait before reading its inputs may be joined that way:
// cuBLASLt documents no PDL, so this probe asks each algorithm the heuristic offers for the
// encoder's four FP8 GEMM shapes (BERT-base, M rows):
//   waits    graph [writer -> programmatic edge -> GEMM], the writer (4 blocks: the GEMM's CTAs
//            fit on the other SMs) letting dependents launch at once and writing the GEMM's
//            input only after a ~40 us spin: the output equals the stream-ordered run's, bit for
//            bit, over 5 replays ("[3 nodes]": cuBLASLt captured two nodes for the call)
//   RACES    it differs: the GEMM read its input before the writer wrote it
// and times a chain of 48 such GEMMs (12 x QKV, output, FFN1 with E4M3 GELU output, FFN2) with
// plain edges against programmatic ones. H200, cuBLASLt 13.1, 2026-12-02: the residual GEMMs
// (output, FFN2: beta 1, C = D) RACE, QKV and FFN1 wait (as two graph nodes), and the
// programmatic chain is no faster (1.666 vs 1.675 ms): our encoder joins no cuBLASLt GEMM by a
// programmatic edge. (With a writer on every SM the GEMMs could not start early and all
// looked as if they waited: keep the writer small.)
// PROBE_TUNE=N: also every tile / kernel option / cluster shape / swizzle cuBLASLt accepts for
// each shape (the first N accepted), timed, against the heuristic's best: 1.6-6% per GEMM
// (H200, 8,192 rows), which QuantGemm's wide search (KernelVariants::gemm_search) now takes.
//   hotline_lt_pdl_probe [M] [candidates]
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gemm.h"

namespace {

__device__ __forceinline__ uint8_t Code(uint32_t i, uint32_t seed) {
  uint32_t h = (i + seed) * 2654435761u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return uint8_t((h & 0x3F) | (h & 0x80));  // E4M3 of magnitude < 2, either sign, never NaN
}

__global__ void FillCodes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = Code(uint32_t(i), seed);
}

// Lets dependents launch first thing, spins, then writes: a dependent that does not wait for
// this grid's completion reads the old bytes.
__global__ void DelayedFill(uint8_t* p, size_t n, uint32_t seed, long long spin) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = Code(uint32_t(i), seed);
}

struct Shape {
  const char* name;
  int N, K;
  bool residual;   // beta 1, C = the FP16 residual
  bool e4m3_gelu;  // D in E4M3, GELU + bias epilogue, D scale
};

struct Gemm {
  Shape sh;
  int M;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  uint8_t* w = nullptr;
  uint8_t* x = nullptr;
  void* y = nullptr;  // D
  __half* bias = nullptr;
  int chosen = -1;
};

float* g_scales = nullptr;  // a, b, d_inv at kStride floats apart (cuBLASLt wants them aligned)
constexpr int kStride = 64;
cublasLtHandle_t g_lt;
void* g_ws = nullptr;
const size_t kWs = 32u << 20;

void Setup(Gemm& g, int cands) {
  const Shape& s = g.sh;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  float* as = g_scales;
  float* bs = g_scales + kStride;
  float* ds = g_scales + 2 * kStride;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &as,
                                              sizeof(as)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &bs,
                                              sizeof(bs)));
  const int8_t fa = 1;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa, sizeof(fa)));
  const int32_t bias_t = CUDA_R_16F;
  if (s.e4m3_gelu) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &ds,
                                                sizeof(ds)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bias_t, sizeof(bias_t)));
  }
  const cublasLtEpilogue_t epi = s.e4m3_gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  CUDA_CHECK(cudaMalloc(&g.bias, size_t(s.N) * 2));
  CUDA_CHECK(cudaMemset(g.bias, 0, size_t(s.N) * 2));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                              sizeof(g.bias)));
  const cudaDataType_t dt = s.e4m3_gelu ? CUDA_R_8F_E4M3 : CUDA_R_16F;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_8F_E4M3, s.K, s.N, s.K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_8F_E4M3, s.K, g.M, s.K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.c, CUDA_R_16F, s.N, g.M, s.N));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.d, dt, s.N, g.M, s.N));
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t wsb = kWs;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &wsb, sizeof(wsb)));
  g.algos.resize(cands);
  int n = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(g_lt, g.desc, g.a, g.b, g.c, g.d, pref, cands,
                                              g.algos.data(), &n));
  g.algos.resize(n);
  cublasLtMatmulPreferenceDestroy(pref);
  CUDA_CHECK(cudaMalloc(&g.w, size_t(s.N) * s.K));
  CUDA_CHECK(cudaMalloc(&g.x, size_t(g.M) * s.K));
  CUDA_CHECK(cudaMalloc(&g.y, size_t(g.M) * s.N * 2));
  FillCodes<<<1024, 256>>>(g.w, size_t(s.N) * s.K, 7);
  CUDA_CHECK(cudaDeviceSynchronize());
}

cublasStatus_t Matmul(const Gemm& g, const cublasLtMatmulAlgo_t* algo, cudaStream_t st) {
  const float alpha = 1.f, beta = g.sh.residual ? 1.f : 0.f;
  // C as the encoder passes it: D itself for an FP16 D (the residual in place), else the input.
  const void* c = g.sh.e4m3_gelu ? static_cast<const void*>(g.x) : g.y;
  return cublasLtMatmul(g_lt, g.desc, &alpha, g.w, g.a, g.x, g.b, &beta, c, g.c, g.y, g.d, algo,
                        g_ws, kWs, st);
}

size_t OutBytes(const Gemm& g) { return size_t(g.M) * g.sh.N * (g.sh.e4m3_gelu ? 1 : 2); }

// Joins the next captured node to the current ones by programmatic edges (all must be kernels).
bool ProgrammaticNext(cudaStream_t st) {
  cudaStreamCaptureStatus cs;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* ed = nullptr;
  size_t n = 0;
  if (cudaStreamGetCaptureInfo(st, &cs, nullptr, nullptr, &deps, &ed, &n) != cudaSuccess ||
      cs != cudaStreamCaptureStatusActive || n == 0)
    return false;
  std::vector<cudaGraphNode_t> d(deps, deps + n);
  std::vector<cudaGraphEdgeData> e(n);
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType t;
    if (cudaGraphNodeGetType(d[i], &t) != cudaSuccess || t != cudaGraphNodeTypeKernel) return false;
    std::memset(&e[i], 0, sizeof(e[i]));
    e[i].from_port = cudaGraphKernelNodePortProgrammatic;
    e[i].type = cudaGraphDependencyTypeProgrammatic;
  }
  return cudaStreamUpdateCaptureDependencies(st, d.data(), e.data(), n,
                                             cudaStreamSetCaptureDependencies) == cudaSuccess;
}

// "waits", "RACES" or why it could not tell.
std::string WaitProbe(Gemm& g, int i, cudaStream_t st, long long spin) {
  const size_t xn = size_t(g.M) * g.sh.K, yb = OutBytes(g);
  // The reference: input written, then the GEMM, stream-ordered.
  FillCodes<<<1024, 256, 0, st>>>(g.x, xn, 11);
  CUDA_CHECK(cudaMemsetAsync(g.y, 0, yb, st));  // the residual (in place) starts at zero
  if (Matmul(g, &g.algos[i].algo, st) != CUBLAS_STATUS_SUCCESS) return "refused";
  std::vector<uint8_t> ref(yb), got(yb);
  CUDA_CHECK(cudaMemcpyAsync(ref.data(), g.y, yb, cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  DelayedFill<<<4, 256, 0, st>>>(g.x, xn, 11, spin);  // 4 SMs: the GEMM fits beside it
  const bool prog = ProgrammaticNext(st);
  const cublasStatus_t ms = Matmul(g, &g.algos[i].algo, st);
  const cudaError_t ce = cudaStreamEndCapture(st, &graph);
  if (!prog || ms != CUBLAS_STATUS_SUCCESS || ce != cudaSuccess) {
    cudaGetLastError();
    if (ce == cudaSuccess) cudaGraphDestroy(graph);
    return std::string("capture failed (programmatic edge ") + (prog ? "set" : "refused") +
           ", matmul " + std::to_string(int(ms)) + ", " + cudaGetErrorString(ce) + ")";
  }
  size_t nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  cudaGraphExec_t exec;
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    cudaGetLastError();
    cudaGraphDestroy(graph);
    return "instantiate failed";
  }
  int bad = 0;
  for (int r = 0; r < 5; ++r) {
    CUDA_CHECK(cudaMemsetAsync(g.x, 0, xn, st));  // a racing GEMM reads zeros
    CUDA_CHECK(cudaMemsetAsync(g.y, 0, yb, st));
    CUDA_CHECK(cudaGraphLaunch(exec, st));
    CUDA_CHECK(cudaMemcpyAsync(got.data(), g.y, yb, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    bad += std::memcmp(ref.data(), got.data(), yb) != 0;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return (bad ? "RACES (" + std::to_string(bad) + "/5 differ)" : std::string("waits")) +
         (nodes != 2 ? " [" + std::to_string(nodes) + " nodes]" : std::string());
}

// Mean device time (us) of one launch over `rounds` replays of a graph of `reps` launches
// (the engine's TimeInGraph), -1 if it does not run.
float TimeOne(Gemm& g, const cublasLtMatmulAlgo_t& algo, int reps, int rounds) {
  const float ms = hotline::engine::cuda::TimeInGraph(
      [&](cudaStream_t st) { return Matmul(g, &algo, st) == CUBLAS_STATUS_SUCCESS; }, reps, rounds);
  return ms > 0 ? ms * 1e3f : -1.f;
}

std::string Describe(const cublasLtMatmulAlgo_t& a) {
  using hotline::engine::cuda::AlgoConfig;
  uint16_t cluster = 0;  // a 16-bit attribute
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                       sizeof(cluster), &w);
  char b[160];
  std::snprintf(b, sizeof(b), "id %d tile %d stages %d custom %d swizzle %d splitk %d cluster %d",
                AlgoConfig(a, CUBLASLT_ALGO_CONFIG_ID), AlgoConfig(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                AlgoConfig(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                AlgoConfig(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                AlgoConfig(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                AlgoConfig(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), int(cluster));
  return b;
}

// The heuristic's candidates against every configuration cuBLASLt accepts for the problem.
void Tune(Gemm& g, cudaStream_t st, int max_cands) {
  CUDA_CHECK(cudaMemsetAsync(g.y, 0, OutBytes(g), st));
  FillCodes<<<1024, 256, 0, st>>>(g.x, size_t(g.M) * g.sh.K, 5);
  float heur_best = -1.f;
  for (auto& h : g.algos) {
    const float t = TimeOne(g, h.algo, 10, 5);
    if (t > 0 && (heur_best < 0 || t < heur_best)) heur_best = t;
  }
  const cudaDataType_t dt = g.sh.e4m3_gelu ? CUDA_R_8F_E4M3 : CUDA_R_16F;
  int ids[64], nids = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetIds(g_lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3,
                                        CUDA_R_8F_E4M3, CUDA_R_16F, dt, 64, ids, &nids));
  std::vector<cublasLtMatmulAlgo_t> cands;
  int checked = 0;
  for (int k = 0; k < nids; ++k) {
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(g_lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3,
                               CUDA_R_16F, dt, ids[k], &algo) != CUBLAS_STATUS_SUCCESS)
      continue;
    namespace hc = hotline::engine::cuda;
    std::vector<int> tiles = hc::AlgoCapList<int>(algo, CUBLASLT_ALGO_CAP_TILE_IDS);
    std::vector<int> stages = hc::AlgoCapList<int>(algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
    if (tiles.empty()) tiles.push_back(0);
    if (stages.empty()) stages.push_back(0);
    const int custom_max = hc::AlgoCap(algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
    const int swz = hc::AlgoCap(algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT);
    std::printf("  algo id %d: %zu tiles, %zu stages, custom <= %d, swizzle %d\n", ids[k],
                tiles.size(), stages.size(), custom_max, swz);
    for (int tile : tiles)
      for (int stage : stages)
        for (int custom = 0; custom <= std::min(custom_max, 7); ++custom)
          for (int cl = 0; cl < int(CUBLASLT_CLUSTER_SHAPE_END); ++cl)
            for (int sw = 0; sw <= (swz ? 1 : 0); ++sw) {
              cublasLtMatmulAlgo_t a = algo;
              hc::SetAlgoConfig(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, uint32_t(tile));
              hc::SetAlgoConfig(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, uint32_t(stage));
              hc::SetAlgoConfig(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, uint32_t(custom));
              hc::SetAlgoConfig(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, uint16_t(cl));
              hc::SetAlgoConfig(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, uint32_t(sw));
              cublasLtMatmulHeuristicResult_t r;
              ++checked;
              if (cublasLtMatmulAlgoCheck(g_lt, g.desc, g.a, g.b, g.c, g.d, &a, &r) ==
                      CUBLAS_STATUS_SUCCESS &&
                  r.workspaceSize <= kWs && int(cands.size()) < max_cands)
                cands.push_back(a);
            }
  }
  std::vector<std::pair<float, int>> quick;
  for (int i = 0; i < int(cands.size()); ++i) {
    const float t = TimeOne(g, cands[i], 5, 1);
    if (t > 0) quick.push_back({t, i});
  }
  std::sort(quick.begin(), quick.end());
  std::vector<std::pair<float, int>> best;
  for (int i = 0; i < std::min<int>(10, int(quick.size())); ++i)
    best.push_back({TimeOne(g, cands[quick[i].second], 10, 7), quick[i].second});
  std::sort(best.begin(), best.end());
  std::printf(
      "tune %-5s: heuristic best %.2f us (%zu candidates); enumerated %d configurations, "
      "%zu accepted, %zu ran; best:\n",
      g.sh.name, heur_best, g.algos.size(), checked, cands.size(), quick.size());
  for (int i = 0; i < std::min<int>(5, int(best.size())); ++i)
    std::printf("tune %-5s   %.2f us  %s\n", g.sh.name, best[i].first,
                Describe(cands[best[i].second]).c_str());
  std::fflush(stdout);
}

// Device time (ms) of `layers` x the four GEMMs in one graph, plain or programmatic edges between
// them (the engine's TimeInGraph: 20 replays after two eager runs); -1 if it did not run.
float TimeChain(std::vector<Gemm>& gs, bool prog, int layers) {
  return hotline::engine::cuda::TimeInGraph(
      [&](cudaStream_t st) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        const bool capturing =
            cudaStreamIsCapturing(st, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusActive;
        FillCodes<<<132, 256, 0, st>>>(gs[0].x, 256, 3);  // a kernel node for the first edge
        for (int l = 0; l < layers; ++l) {
          for (auto& g : gs) {
            if (prog && capturing && !ProgrammaticNext(st)) return false;
            if (Matmul(g, &g.algos[g.chosen].algo, st) != CUBLAS_STATUS_SUCCESS) return false;
          }
        }
        return true;
      },
      1, 20);
}

}  // namespace

int Probe(int argc, char** argv) {
  const int M = argc > 1 ? std::atoi(argv[1]) : 8192;
  const int cands = argc > 2 ? std::atoi(argv[2]) : 8;
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int ltv = int(cublasLtGetVersion());
  std::printf("device %s sm_%d%d, cuBLASLt %d, M = %d\n", prop.name, prop.major, prop.minor, ltv,
              M);
  if (prop.major < 9) {
    std::printf("programmatic dependent launch and FP8 GEMMs need sm_90: nothing to probe\n");
    return 0;
  }
  CUBLAS_CHECK(cublasLtCreate(&g_lt));
  CUDA_CHECK(cudaMalloc(&g_ws, kWs));
  CUDA_CHECK(cudaMalloc(&g_scales, 3 * kStride * 4));
  const float sc[3] = {1.f / 64, 1.f / 64, 1.f};
  for (int i = 0; i < 3; ++i)
    CUDA_CHECK(cudaMemcpy(g_scales + i * kStride, sc + i, 4, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int khz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const long long spin = (long long)(khz)*40 / 1000;  // ~40 us at the peak clock (longer below it)
  std::vector<Gemm> gs = {{{"qkv", 2304, 768, false, false}, M},
                          {{"out", 768, 768, true, false}, M},
                          {{"ffn1", 3072, 768, false, true}, M},
                          {{"ffn2", 768, 3072, true, false}, M}};
  int waiting_all = 1;
  for (auto& g : gs) {
    Setup(g, cands);
    for (int i = 0; i < int(g.algos.size()); ++i) {
      const std::string r = WaitProbe(g, i, st, spin);
      int id = -1, tile = -1, stages = -1;
      size_t w = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&g.algos[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id,
                                           sizeof(id), &w);
      cublasLtMatmulAlgoConfigGetAttribute(&g.algos[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                           sizeof(tile), &w);
      cublasLtMatmulAlgoConfigGetAttribute(&g.algos[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                           &stages, sizeof(stages), &w);
      std::printf("probe %-5s N=%4d K=%4d algo %d (id %d tile %d stages %d): %s\n", g.sh.name,
                  g.sh.N, g.sh.K, i, id, tile, stages, r.c_str());
      if (r.rfind("waits", 0) == 0 && g.chosen < 0) g.chosen = i;
    }
    if (g.chosen < 0) waiting_all = 0;
  }
  if (!waiting_all) {
    std::printf(
        "programmatic chain: not timed (a shape has no waiting algorithm); plain chain "
        "with the heuristic's best\n");
    for (auto& g : gs) g.chosen = 0;
  }
  const float plain = TimeChain(gs, false, 12);
  std::printf("chain 48 GEMMs plain edges: %.4f ms\n", plain);
  if (waiting_all) {
    const float prog = TimeChain(gs, true, 12);
    std::printf("chain 48 GEMMs programmatic edges: %.4f ms (%.1f us per GEMM saved)\n", prog,
                (plain - prog) * 1e3 / 48);
  }
  if (std::getenv("PROBE_TUNE")) {
    for (auto& g : gs) Tune(g, st, std::atoi(std::getenv("PROBE_TUNE")));
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return Probe(argc, argv);
  } catch (const hotline::Error& e) {
    std::fprintf(stderr, "hotline_lt_pdl_probe: %s\n", e.what());
    return 1;
  }
}
