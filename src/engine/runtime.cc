// The runtime: Engine (prepared ops, immutable) and Context (buffers sized for the profile max).
//
// Packed plans run one prepared backend op per node over padding-free buffers: per-token values
// have total_tokens rows, per-sequence values batch rows. Buffers are assigned once per engine
// by liveness (a value's buffer is reused after its last reader) and allocated per context.
// Padded plans (graphs that did not fuse) run the reference interpreter over [batch, seq] input.
// A backend may claim a whole packed graph (Backend::PrepareGraph, e.g. the CUDA encoder runner);
// the engine then runs that instead of the per-node ops.
//
// Several devices: the engine holds one replica (backend + prepared ops or runner) per device and
// CreateContext deals contexts out over them in turn.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "base/error.h"
#include "engine/passes.h"
#include "engine/runtime.h"
#include "engine/quant.h"
#include "engine/quant_internal.h"

namespace hotline::engine {
namespace {

struct Step {
  std::unique_ptr<PreparedOp> op;
  std::vector<int> in, out;  // buffer index per input/output; -1 absent, -2 ids, -3 types
  bool token_rows = true;    // rows = tokens (else sequences)
};

struct BufferSpec {
  bool token_rows;
  int64_t inner;
};

// What one device holds.
struct Replica {
  int device = 0;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<GraphRunner> runner;  // set when the backend runs the whole graph
  std::vector<Step> steps;
};

class EngineImpl : public Engine, public std::enable_shared_from_this<EngineImpl> {
 public:
  EngineImpl(PlanData plan, const EngineOptions& options);
  const PlanInfo& info() const override { return plan_.info; }
  std::unique_ptr<Context> CreateContext() const override;

  const PlanData& plan() const { return plan_; }
  PlanData& mutable_plan() { return plan_; }
  // The replica the next context uses (round robin).
  const Replica& NextReplica() const {
    return replicas_[size_t(next_.fetch_add(1)) % replicas_.size()];
  }
  const std::vector<Replica>& replicas() const { return replicas_; }
  const std::vector<BufferSpec>& buffers() const { return buffers_; }
  const std::vector<int>& output_buffers() const { return output_buffers_; }
  size_t scratch_bytes() const { return scratch_bytes_; }
  int vocab() const { return vocab_; }
  int type_vocab() const { return type_vocab_; }
  int max_pos() const { return max_pos_; }
  bool packed() const { return plan_.mode == "packed"; }

 private:
  void PreparePacked(Replica* r, const EngineOptions& options);
  bool TokenRows(const std::string& v) const {
    auto it = plan_.dims.find(v);
    return it != plan_.dims.end() && it->second.size() > 1 && it->second[1] == "seq";
  }
  int64_t Inner(const std::string& v) const;

  PlanData plan_;
  std::vector<Replica> replicas_;
  mutable std::atomic<uint64_t> next_{0};
  std::vector<BufferSpec> buffers_;
  std::vector<int> output_buffers_;
  size_t scratch_bytes_ = 0;
  int vocab_ = 0, type_vocab_ = 1, max_pos_ = 0;
};

int64_t EngineImpl::Inner(const std::string& v) const {
  auto it = plan_.dims.find(v);
  if (it == plan_.dims.end()) throw Error("plan has no shape for value '" + v + "'");
  int64_t n = 1;
  for (size_t k = TokenRows(v) ? 2 : 1; k < it->second.size(); ++k) n *= std::stoll(it->second[k]);
  return n;
}

EngineImpl::EngineImpl(PlanData plan, const EngineOptions& options) : plan_(std::move(plan)) {
  std::vector<int> devices = options.devices;
  if (devices.empty()) devices.push_back(0);
  if (plan_.info.backend != BackendKind::kCUDA && devices != std::vector<int>{0}) {
    throw Error("devices apply to the cuda backend only; this plan is for the " +
                std::string(BackendName(plan_.info.backend)) + " backend");
  }
  for (size_t k = 0; k < devices.size(); ++k) {
    for (size_t j = 0; j < k; ++j) {
      if (devices[j] == devices[k]) {
        throw Error("device " + std::to_string(devices[k]) + " is listed twice");
      }
    }
  }
  for (int dev : devices) {
    Replica r;
    r.device = dev;
    r.backend = CreateBackend(plan_.info.backend, dev);
    if (options.check_hardware) CheckFingerprint(plan_.info.fingerprint, r.backend->Fingerprint());
    r.backend->CheckPrecision(plan_.info.precision);
    replicas_.push_back(std::move(r));
  }
  if (packed()) {
    for (auto& r : replicas_) PreparePacked(&r, options);
    // Prepared ops and runners hold their own copies of the weights (padded plans run the
    // reference interpreter over the graph and keep them).
    plan_.graph.initializers.clear();
  }
}

void EngineImpl::PreparePacked(Replica* rep, const EngineOptions& options) {
  const Graph& g = plan_.graph;
  Backend* backend = rep->backend.get();
  buffers_.clear();
  output_buffers_.clear();
  scratch_bytes_ = 0;
  const Profile& pr = plan_.info.profile;
  const int max_tokens = pr.max_batch * pr.max_seq;
  std::map<std::string, int> buf_of;
  std::map<std::string, size_t> last_use;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (const auto& in : g.nodes[k].inputs) last_use[in] = k;
  }
  std::set<std::string> outputs;
  for (const auto& o : g.outputs) outputs.insert(o.name);
  std::multimap<std::pair<bool, int64_t>, int> free_list;
  for (const Node& n : g.nodes) {
    if (n.op == "EmbedLayerNorm") {
      vocab_ = int(g.Const(n.inputs[2])->shape[0]);
      max_pos_ = int(g.Const(n.inputs[3])->shape[0]);
      if (!n.inputs[4].empty()) type_vocab_ = int(g.Const(n.inputs[4])->shape[0]);
    }
  }
  GraphOptions go;
  go.device = rep->device;
  go.tune = options.tune;
  go.timing_cache = options.timing_cache;
  go.calib_sequences = options.calib_sequences;
  go.fp8_weight_scaling = options.fp8_weight_scaling;
  go.fp8_fast_accum_max_k = options.fp8_fast_accum_max_k;
  go.int8_act_amax = EncoderInt8ActAmax(plan_);  // cuda int8 plans (calib.cc), else empty
  if (!go.int8_act_amax.empty()) {
    try {  // the description's words only; a record of the wrong types is a plan error
      const auto& r = plan_.extra["int8"];
      go.int8_calib = r.value("method", std::string("?"));
      if (r.value("method", std::string()) == "percentile") {
        char pct[32];
        std::snprintf(pct, sizeof pct, " %g", r.value("percentile", 0.0));
        go.int8_calib += pct;
      }
      go.int8_calib += ", " + std::to_string(r.value("samples", int64_t(0))) + " samples";
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("plan: malformed int8 calibration record: ") + e.what(),
                  Code::kInvalidArgument);
    }
  }
  if (plan_.extra.contains("gemm_tuning") && plan_.extra["gemm_tuning"].is_string()) {
    go.tuning = plan_.extra["gemm_tuning"].get<std::string>();
  }
  if (options.graph_runners && (rep->runner = backend->PrepareGraph(g, plan_.info, go))) return;
  plan_.info.ops.clear();
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (!backend->SupportsOp(n, plan_.info.precision)) {
      throw Error(n.Describe() + " is not supported by the " +
                  std::string(BackendName(plan_.info.backend)) + " backend", Code::kUnimplemented);
    }
    Step st;
    OpShapes shapes;
    for (const auto& in : n.inputs) {
      const bool is_const = !in.empty() && g.IsConst(in);
      shapes.in_const.push_back(is_const);
      if (in.empty()) {
        st.in.push_back(-1);
        shapes.in_inner.push_back(0);
      } else if (is_const) {
        st.in.push_back(-1);  // read by Prepare
        shapes.in_inner.push_back(g.Const(in)->numel());
      } else if (g.IsInput(in)) {
        st.in.push_back(RoleOf(in) == InputRole::kTypes ? -3 : -2);
        shapes.in_inner.push_back(1);
      } else {
        st.in.push_back(buf_of.at(in));
        shapes.in_inner.push_back(Inner(in));
      }
    }
    for (const auto& o : n.outputs) {
      const BufferSpec spec{TokenRows(o), Inner(o)};
      shapes.out_inner.push_back(spec.inner);
      auto it = free_list.find({spec.token_rows, spec.inner});
      int b;
      if (it != free_list.end()) {
        b = it->second;
        free_list.erase(it);
      } else {
        b = int(buffers_.size());
        buffers_.push_back(spec);
      }
      buf_of[o] = b;
      st.out.push_back(b);
    }
    st.token_rows = n.op == "FirstToken" ? true : TokenRows(n.outputs[0]);
    st.op = backend->Prepare(n, g, shapes, plan_.info.precision);
    scratch_bytes_ = std::max(scratch_bytes_, st.op->ScratchBytes(max_tokens, pr.max_seq));
    plan_.info.ops.push_back({n.name, n.op, st.op->precision()});
    // Release buffers whose last reader was this node.
    for (const auto& in : n.inputs) {
      if (!in.empty() && buf_of.count(in) && last_use[in] == k && !outputs.count(in)) {
        const int b = buf_of[in];
        free_list.insert({{buffers_[b].token_rows, buffers_[b].inner}, b});
        buf_of.erase(in);
      }
    }
    rep->steps.push_back(std::move(st));
  }
  for (const auto& o : g.outputs) output_buffers_.push_back(buf_of.at(o.name));
}

// ---- contexts ----

class ContextImpl : public Context {
 public:
  explicit ContextImpl(std::shared_ptr<const EngineImpl> e)
      : e_(std::move(e)), rep_(&e_->NextReplica()) {
    if (!e_->packed()) return;
    if (rep_->runner) {
      runner_ctx_ = rep_->runner->CreateContext();
      return;
    }
    const Profile& pr = e_->plan().info.profile;
    max_tokens_ = pr.max_batch * pr.max_seq;
    Backend* be = rep_->backend.get();
    for (const auto& spec : e_->buffers()) {
      const int64_t rows = spec.token_rows ? max_tokens_ : pr.max_batch;
      bufs_.push_back(be->Allocate(size_t(rows * spec.inner) * sizeof(float)));
    }
    ids_ = static_cast<int32_t*>(be->Allocate(size_t(max_tokens_) * 4));
    types_ = static_cast<int32_t*>(be->Allocate(size_t(max_tokens_) * 4));
    cu_ = static_cast<int32_t*>(be->Allocate(size_t(pr.max_batch + 1) * 4));
    scratch_ = e_->scratch_bytes() ? be->Allocate(e_->scratch_bytes()) : nullptr;
    zeros_.assign(size_t(max_tokens_), 0);
    for (const auto& st : rep_->steps) {
      std::vector<const void*> in;
      std::vector<void*> out;
      for (int b : st.in) {
        in.push_back(b == -1 ? nullptr : b == -2 ? ids_ : b == -3 ? types_ : bufs_[b]);
      }
      for (int b : st.out) out.push_back(bufs_[b]);
      ins_.push_back(std::move(in));
      outs_.push_back(std::move(out));
    }
  }
  ~ContextImpl() override {
    Backend* be = rep_->backend.get();
    for (void* p : bufs_) be->Free(p);
    for (void* p : {static_cast<void*>(ids_), static_cast<void*>(types_), static_cast<void*>(cu_),
                    scratch_}) {
      if (p) be->Free(p);
    }
  }

  void Run(const PackedBatch& batch, std::vector<Output>* outputs) override;
  std::map<std::string, Tensor> RunPadded(const std::map<std::string, Tensor>& inputs) override;

 private:
  void Validate(const PackedBatch& batch) const;
  void RunPackedPlan(const PackedBatch& batch, std::vector<Output>* outputs);
  std::map<std::string, HTensor> PaddedFeeds(const PackedBatch& batch) const;

  std::shared_ptr<const EngineImpl> e_;
  const Replica* rep_;
  std::unique_ptr<GraphRunnerContext> runner_ctx_;
  int max_tokens_ = 0;
  std::vector<void*> bufs_;
  int32_t* ids_ = nullptr;
  int32_t* types_ = nullptr;
  int32_t* cu_ = nullptr;
  void* scratch_ = nullptr;
  std::vector<int32_t> zeros_;  // host zeros: token types when the batch has none
  std::vector<std::vector<const void*>> ins_;
  std::vector<std::vector<void*>> outs_;
};

void ContextImpl::Validate(const PackedBatch& b) const {
  const int n = b.batch();
  if (b.cu_seqlens.size() < 2 || b.cu_seqlens[0] != 0) {
    throw Error("packed batch: cu_seqlens must start with 0 and hold batch+1 offsets, got " +
                std::to_string(b.cu_seqlens.size()) + " values");
  }
  for (int k = 0; k < n; ++k) {
    if (b.cu_seqlens[k + 1] <= b.cu_seqlens[k]) {
      throw Error("packed batch: sequence " + std::to_string(k) + " is empty or cu_seqlens "
                  "decreases (every sequence needs at least one token)");
    }
  }
  if (size_t(b.total_tokens()) != b.input_ids.size()) {
    throw Error("packed batch: cu_seqlens ends at " + std::to_string(b.total_tokens()) +
                " but input_ids has " + std::to_string(b.input_ids.size()) + " tokens");
  }
  if (!b.token_type_ids.empty() && b.token_type_ids.size() != b.input_ids.size()) {
    throw Error("packed batch: token_type_ids has " + std::to_string(b.token_type_ids.size()) +
                " values for " + std::to_string(b.input_ids.size()) + " tokens");
  }
  e_->plan().info.profile.Check(n, b.max_seqlen());
  if (e_->packed()) {
    if (b.max_seqlen() > e_->max_pos()) {
      throw Error("sequence length " + std::to_string(b.max_seqlen()) + " exceeds the model's " +
                  std::to_string(e_->max_pos()) + " position embeddings", Code::kOutOfRange);
    }
    for (size_t t = 0; t < b.input_ids.size(); ++t) {
      if (b.input_ids[t] < 0 || b.input_ids[t] >= e_->vocab()) {
        throw Error("token id " + std::to_string(b.input_ids[t]) + " at position " +
                    std::to_string(t) + " is outside the vocabulary [0, " +
                    std::to_string(e_->vocab()) + ")");
      }
    }
    for (size_t t = 0; t < b.token_type_ids.size(); ++t) {
      if (b.token_type_ids[t] < 0 || b.token_type_ids[t] >= e_->type_vocab()) {
        throw Error("token type " + std::to_string(b.token_type_ids[t]) + " at position " +
                    std::to_string(t) + " is outside [0, " + std::to_string(e_->type_vocab()) +
                    ")");
      }
    }
  }
}

void ContextImpl::RunPackedPlan(const PackedBatch& b, std::vector<Output>* outputs) {
  Backend* be = rep_->backend.get();
  const int T = b.total_tokens(), B = b.batch();
  be->CopyToDevice(ids_, b.input_ids.data(), size_t(T) * 4);
  if (b.token_type_ids.empty()) {
    be->CopyToDevice(types_, zeros_.data(), size_t(T) * 4);
  } else {
    be->CopyToDevice(types_, b.token_type_ids.data(), size_t(T) * 4);
  }
  be->CopyToDevice(cu_, b.cu_seqlens.data(), size_t(B + 1) * 4);
  const auto& steps = rep_->steps;
  for (size_t k = 0; k < steps.size(); ++k) {
    LaunchArgs a;
    a.in = ins_[k].data();
    a.out = outs_[k].data();
    a.rows = steps[k].token_rows ? T : B;
    a.batch = B;
    a.max_seqlen = b.max_seqlen();
    a.cu_seqlens = cu_;
    a.scratch = scratch_;
    steps[k].op->Run(a);
  }
  be->Synchronize();
  const auto& info = e_->info();
  outputs->resize(info.outputs.size());
  for (size_t k = 0; k < info.outputs.size(); ++k) {
    Output& o = (*outputs)[k];
    const OutputInfo& oi = info.outputs[k];
    const int64_t rows = oi.kind == Output::Kind::kPerToken ? T : B;
    int64_t inner = 1;
    for (int64_t d : oi.inner_shape) inner *= d;
    o.name = oi.name;
    o.kind = oi.kind;
    o.shape.assign(1, rows);
    o.shape.insert(o.shape.end(), oi.inner_shape.begin(), oi.inner_shape.end());
    if (o.data.capacity() == 0) {
      const Profile& pr = info.profile;
      o.data.reserve(size_t((oi.kind == Output::Kind::kPerToken ? max_tokens_ : pr.max_batch) *
                            inner));
    }
    o.data.resize(size_t(rows * inner));
    be->CopyToHost(o.data.data(), bufs_[e_->output_buffers()[k]], o.data.size() * sizeof(float));
  }
}

std::map<std::string, HTensor> ContextImpl::PaddedFeeds(const PackedBatch& b) const {
  const int B = b.batch(), S = b.max_seqlen();
  std::map<std::string, HTensor> feeds;
  for (const auto& in : e_->plan().graph.inputs) {
    HTensor t = HTensor::Zeros(in.dtype, {B, S});
    for (int r = 0; r < B; ++r) {
      for (int s = 0; s < b.cu_seqlens[r + 1] - b.cu_seqlens[r]; ++s) {
        const int tok = b.cu_seqlens[r] + s;
        switch (RoleOf(in.name)) {
          case InputRole::kIds: t.i[r * S + s] = b.input_ids[tok]; break;
          case InputRole::kMask: t.i[r * S + s] = 1; break;
          case InputRole::kTypes:
            t.i[r * S + s] = b.token_type_ids.empty() ? 0 : b.token_type_ids[tok];
            break;
          case InputRole::kPositions: t.i[r * S + s] = s; break;
        }
      }
    }
    feeds[in.name] = std::move(t);
  }
  return feeds;
}

void ContextImpl::Run(const PackedBatch& batch, std::vector<Output>* outputs) {
  Validate(batch);
  if (runner_ctx_) {
    runner_ctx_->Run(batch, outputs);
    return;
  }
  if (e_->packed()) {
    RunPackedPlan(batch, outputs);
    return;
  }
  // Padded plan: pad, run the reference interpreter, unpad.
  auto result = RunReference(e_->plan().graph, PaddedFeeds(batch));
  const auto& info = e_->info();
  const int B = batch.batch(), S = batch.max_seqlen();
  outputs->resize(info.outputs.size());
  for (size_t k = 0; k < info.outputs.size(); ++k) {
    const OutputInfo& oi = info.outputs[k];
    const HTensor& t = result.at(oi.name);
    if (!t.is_float()) throw Error("output '" + oi.name + "' is not float32");
    Output& o = (*outputs)[k];
    o.name = oi.name;
    o.kind = oi.kind;
    int64_t inner = 1;
    for (int64_t d : oi.inner_shape) inner *= d;
    if (oi.kind == Output::Kind::kPerSequence) {
      o.shape = {B};
      o.data.assign(t.f.begin(), t.f.begin() + B * inner);
    } else {
      o.shape = {batch.total_tokens()};
      o.data.clear();
      for (int r = 0; r < B; ++r) {
        const int len = batch.cu_seqlens[r + 1] - batch.cu_seqlens[r];
        o.data.insert(o.data.end(), t.f.begin() + r * S * inner,
                      t.f.begin() + (r * S + len) * inner);
      }
    }
    o.shape.insert(o.shape.end(), oi.inner_shape.begin(), oi.inner_shape.end());
  }
}

std::map<std::string, Tensor> ContextImpl::RunPadded(const std::map<std::string, Tensor>& inputs) {
  const Tensor* ids = nullptr;
  const Tensor* mask = nullptr;
  const Tensor* types = nullptr;
  const Tensor* positions = nullptr;
  for (const auto& name : e_->info().input_names) {
    auto it = inputs.find(name);
    const InputRole role = RoleOf(name);
    if (it == inputs.end()) {
      if (role == InputRole::kIds) throw Error("missing input '" + name + "'");
      continue;
    }
    const Tensor& t = it->second;
    if (t.dtype == Tensor::DType::kF32) {
      throw Error("input '" + name + "' must be an integer tensor (int64 or int32), got float32");
    }
    if (t.shape.size() != 2 || int64_t(t.i64.size()) != t.numel()) {
      throw Error("input '" + name + "' must be [batch, seq] with batch*seq values, got shape " +
                  ShapeString(t.shape) + " with " + std::to_string(t.i64.size()) + " values");
    }
    if (role == InputRole::kPositions) {
      positions = &t;
      continue;
    }
    (role == InputRole::kIds ? ids : role == InputRole::kMask ? mask : types) = &t;
  }
  for (const auto& [name, t] : inputs) {
    const auto& names = e_->info().input_names;
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      throw Error("unknown input '" + name + "' (the plan takes " +
                  [&] { std::string s; for (auto& n : names) s += (s.empty() ? "" : ", ") + n; return s; }() + ")");
    }
  }
  if (!ids) throw Error("missing input 'input_ids'");
  const int64_t B = ids->shape[0], S = ids->shape[1];
  for (const Tensor* t : {mask, types, positions}) {
    if (t && t->shape != ids->shape) {
      throw Error("inputs must all have the shape of input_ids " + ShapeString(ids->shape) +
                  ", got " + ShapeString(t->shape));
    }
  }
  PackedBatch pb;
  pb.cu_seqlens.push_back(0);
  for (int64_t r = 0; r < B; ++r) {
    int64_t len = S;
    if (mask) {
      len = 0;
      while (len < S && mask->i64[r * S + len] != 0) ++len;
      for (int64_t s = len; s < S; ++s) {
        if (mask->i64[r * S + s] != 0) {
          throw Error("attention_mask row " + std::to_string(r) + " is not a run of 1s followed "
                      "by 0s (right padding); the engine packs right-padded batches");
        }
      }
    }
    for (int64_t s = 0; s < len; ++s) {
      if (positions && positions->i64[r * S + s] != s) {
        throw Error("position_ids row " + std::to_string(r) + " is not 0, 1, 2, ... over its "
                    "tokens (found " + std::to_string(positions->i64[r * S + s]) + " at " +
                    std::to_string(s) + "); the engine numbers positions itself");
      }
      // Checked before narrowing to int32: 2^32 + 5 must not pass as token 5.
      const int64_t id = ids->i64[r * S + s], type = types ? types->i64[r * S + s] : 0;
      const int64_t vocab = e_->packed() ? int64_t(e_->vocab())
                                         : int64_t(std::numeric_limits<int32_t>::max()) + 1;
      if (id < 0 || id >= vocab) {
        throw Error("input_ids[" + std::to_string(r) + "][" + std::to_string(s) + "] = " +
                    std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(vocab) + ")");
      }
      if (type < 0 || type > std::numeric_limits<int32_t>::max()) {
        throw Error("token_type_ids[" + std::to_string(r) + "][" + std::to_string(s) + "] = " +
                    std::to_string(type) + " is not a valid token type");
      }
      pb.input_ids.push_back(int32_t(id));
      pb.token_type_ids.push_back(int32_t(type));
    }
    pb.cu_seqlens.push_back(int32_t(pb.input_ids.size()));
  }
  std::vector<Output> outs;
  Run(pb, &outs);
  std::map<std::string, Tensor> result;
  for (const Output& o : outs) {
    Tensor t;
    t.dtype = Tensor::DType::kF32;
    int64_t inner = 1;
    for (size_t d = 1; d < o.shape.size(); ++d) inner *= o.shape[d];
    if (o.kind == Output::Kind::kPerSequence) {
      t.shape = o.shape;
      t.f32 = o.data;
    } else {  // re-pad per-token outputs to [batch, seq, ...]; padded positions are 0
      t.shape = {B, S};
      t.shape.insert(t.shape.end(), o.shape.begin() + 1, o.shape.end());
      t.f32.assign(size_t(B * S * inner), 0.f);
      for (int64_t r = 0; r < B; ++r) {
        const int64_t len = pb.cu_seqlens[r + 1] - pb.cu_seqlens[r];
        std::copy_n(o.data.begin() + pb.cu_seqlens[r] * inner, len * inner,
                    t.f32.begin() + r * S * inner);
      }
    }
    result[o.name] = std::move(t);
  }
  return result;
}

std::unique_ptr<Context> EngineImpl::CreateContext() const {
  return std::make_unique<ContextImpl>(shared_from_this());
}

// Build time, CUDA: let the runner choose its GEMMs for the profile's typical shapes now and
// record the choices in the plan, so a load on the same GPU does not time them again.
void RecordTuning(const EngineImpl& e, PlanData* plan) {
  const Profile& p = plan->info.profile;
  for (const auto& r : e.replicas()) {
    if (!r.runner) continue;
    // The profile's points, plus batches of 16-token sequences for the token counts up to 2048
    // (the buckets serving's small batches fall into; larger ones are tuned on first use).
    std::vector<std::pair<int, int>> shapes = {
        {1, p.opt_seq}, {p.opt_batch, p.opt_seq}, {p.max_batch, p.max_seq}};
    const int seq = std::min(16, p.max_seq);
    for (int t = 16; t <= 2048 && t <= p.max_batch * seq; t += t < 128 ? 16 : t < 1024 ? 64 : 256) {
      shapes.push_back({t / seq, seq});
    }
    r.runner->Warmup(shapes);
    const std::string rec = r.runner->TuningRecord();
    if (!rec.empty()) plan->extra["gemm_tuning"] = rec;
    plan->extra["graph_runner"] = r.runner->Describe();
    break;
  }
}

EngineOptions FromBuild(const BuildOptions& options) {
  EngineOptions eo;
  eo.devices = options.devices.empty() ? std::vector<int>{options.device} : options.devices;
  eo.tune = options.tune;
  eo.timing_cache = options.timing_cache;
  if (options.precision == Precision::kFP8) {  // the FP8 runner calibrates on the call text
    eo.fp8_weight_scaling = options.fp8_weight_scaling;
    eo.fp8_fast_accum_max_k = options.fp8_fast_accum_max_k;
    eo.calib_sequences = options.calib_sequences;
    if (!options.calib_file.empty()) {
      auto more = ReadCalibrationJsonl(options.calib_file, options.calib_tokenizer,
                                       options.calib_max_lines);
      eo.calib_sequences.insert(eo.calib_sequences.end(), more.begin(), more.end());
    }
  }
  return eo;
}

}  // namespace

void CheckFingerprint(const std::map<std::string, std::string>& plan,
                      const std::map<std::string, std::string>& here) {
  auto text = [](const std::map<std::string, std::string>& f) {
    std::string s;
    for (const auto& [k, v] : f) s += (s.empty() ? "" : ", ") + k + "=" + v;
    return "{" + s + "}";
  };
  for (const auto& [key, value] : here) {
    auto it = plan.find(key);
    const std::string theirs = it == plan.end() ? "(none)" : it->second;
    if (theirs != value) {
      throw Error("plan was built for " + key + " " + theirs + " but this machine has " + key +
                      " " + value + " (plan: " + text(plan) + "; here: " + text(here) +
                      "): rebuild the plan here from the ONNX model",
                  Code::kFailedPrecondition);
    }
  }
}

std::shared_ptr<Engine> MakeEngine(PlanData plan, bool check_hardware) {
  EngineOptions eo;
  eo.check_hardware = check_hardware;
  return MakeEngine(std::move(plan), eo);
}

std::shared_ptr<Engine> MakeEngine(PlanData plan, const EngineOptions& options) {
  return std::make_shared<EngineImpl>(std::move(plan), options);
}

std::shared_ptr<Engine> Engine::Load(const std::string& plan_path) {
  return MakeEngine(ReadPlan(plan_path, /*load_weights=*/true), /*check_hardware=*/true);
}

std::shared_ptr<Engine> Engine::Load(const std::string& plan_path,
                                     const std::vector<int>& devices) {
  EngineOptions eo;
  eo.devices = devices;
  return MakeEngine(ReadPlan(plan_path, /*load_weights=*/true), eo);
}

std::shared_ptr<Engine> Engine::BuildFromOnnx(const std::string& onnx_path,
                                              const BuildOptions& options) {
  PlanData plan = BuildPlanData(onnx_path, options);
  auto e = std::make_shared<EngineImpl>(std::move(plan), FromBuild(options));
  if (options.backend == BackendKind::kCUDA) RecordTuning(*e, &e->mutable_plan());
  return e;
}

void BuildPlanFile(const std::string& onnx_path, const BuildOptions& options,
                   const std::string& plan_path) {
  PlanData plan = BuildPlanData(onnx_path, options);
  if (options.backend == BackendKind::kCUDA && plan.mode == "packed") {
    // Prepare it once here (same GPU as the build) to tune and record the runner's GEMMs.
    EngineOptions eo = FromBuild(options);
    eo.devices = {options.device};
    PlanData copy = plan;
    EngineImpl e(std::move(copy), eo);
    RecordTuning(e, &plan);
  }
  WritePlan(plan, plan_path);
}

PlanInfo InspectPlan(const std::string& plan_path) {
  return ReadPlan(plan_path, /*load_weights=*/false).info;
}

}  // namespace hotline::engine
