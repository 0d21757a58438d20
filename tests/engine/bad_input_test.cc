// Bad input gets a clear hotline::Error, never a crash: ONNX files, plans, batches, options.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "engine/cpu/kernels.h"
#include "engine/engine.h"
#include "engine/onnx_import.h"
#include "engine/plan.h"
#include "engine/test_util.h"

namespace hotline::engine {
namespace {

namespace fs = std::filesystem;

fs::path TempDir() {
  fs::path d = fs::temp_directory_path() / ("hotline_engine_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string ReadAll(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void WriteAll(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

// Expects `fn` to throw hotline::Error whose message contains every `parts`.
template <typename Fn>
void ExpectError(Fn fn, std::vector<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning " << parts[0];
  } catch (const Error& e) {
    for (const auto& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message lacks '" << p << "': " << e.what();
    }
  }
}

BuildOptions SmallOpts() {
  BuildOptions o;
  o.profile = Profile::Parse("1x1:2x8:4x16");
  o.tune = false;
  return o;
}

onnx::ModelProto OneNodeModel(const std::string& op) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(14);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("my_node");
  n->add_input("x");
  n->add_output("y");
  g->add_output()->set_name("y");
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::FLOAT);
  return m;
}

TEST(BadOnnxTest, TruncatedCorruptEmptyAndMissing) {
  const auto dir = TempDir();
  const std::string bytes = ReadAll(FixturePath("tiny_op14.onnx"));
  WriteAll(dir / "trunc.onnx", bytes.substr(0, bytes.size() / 2));
  ExpectError([&] { ImportOnnx(dir / "trunc.onnx"); }, {"trunc.onnx"});
  std::string corrupt = bytes;
  for (size_t k = 0; k < corrupt.size(); k += 97) corrupt[k] = char(0xff);
  WriteAll(dir / "corrupt.onnx", corrupt);
  ExpectError([&] { ImportOnnx(dir / "corrupt.onnx"); }, {"corrupt.onnx"});
  WriteAll(dir / "empty.onnx", "");
  ExpectError([&] { ImportOnnx(dir / "empty.onnx"); }, {"empty"});
  WriteAll(dir / "text.onnx", "this is not a model at all, just text\n");
  ExpectError([&] { ImportOnnx(dir / "text.onnx"); }, {"text.onnx"});
  ExpectError([&] { ImportOnnx(dir / "missing.onnx"); }, {"cannot open"});
}

TEST(BadOnnxTest, UnsupportedOpNamesOpNodeAndOpset) {
  const auto dir = TempDir();
  WriteAll(dir / "nms.onnx", OneNodeModel("NonMaxSuppression").SerializeAsString());
  ExpectError([&] { ImportOnnx(dir / "nms.onnx"); },
              {"unsupported op NonMaxSuppression", "my_node", "opset 14"});
}

TEST(BadOnnxTest, ExternalDataMayNotLeaveTheModelFolder) {
  const auto dir = TempDir();
  onnx::ModelProto m = OneNodeModel("Identity");
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(4);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = t->add_external_data();
  kv->set_key("location");
  kv->set_value("../../etc/passwd");
  WriteAll(dir / "escape.onnx", m.SerializeAsString());
  ExpectError([&] { ImportOnnx(dir / "escape.onnx"); }, {"leaves the model's folder"});
  kv->set_value("weights.bin");  // inside, but too short
  WriteAll(dir / "weights.bin", "abc");
  WriteAll(dir / "short.onnx", m.SerializeAsString());
  ExpectError([&] { ImportOnnx(dir / "short.onnx"); }, {"weights.bin", "truncated"});
}

TEST(BadOptionsTest, PrecisionBackendAndProfile) {
  const std::string onnx = FixturePath("tiny_op14.onnx");
  BuildOptions o = SmallOpts();
  for (Precision p : {Precision::kFP16, Precision::kFP8}) {
    o.precision = p;
    ExpectError([&] { Engine::BuildFromOnnx(onnx, o); }, {"not supported on cpu backend"});
  }
  // INT8 runs on CPU (int8_plan_test.cc) but needs calibration data, a cache or a table.
  o.precision = Precision::kINT8;
  ExpectError([&] { Engine::BuildFromOnnx(onnx, o); }, {"int8 needs calibration", "--calib"});
  o = SmallOpts();
  o.backend = BackendKind::kCUDA;
#ifndef HOTLINE_WITH_CUDA
  ExpectError([&] { Engine::BuildFromOnnx(onnx, o); }, {"cuda", "not built"});
#endif
  ExpectError([] { Profile::Parse("1x1:8x64"); }, {"min:opt:max"});
  ExpectError([] { Profile::Parse("1x1:8x64:4x128"); }, {"min <= opt <= max"});
  ExpectError([] { ParsePrecision("fp64"); }, {"unknown precision 'fp64'"});
  o = SmallOpts();
  o.profile = Profile::Parse("1x1:2x8:4x128");  // the tiny model has 64 positions
  ExpectError([&] { Engine::BuildFromOnnx(onnx, o); }, {"64 position embeddings"});
}

class PlanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    plan_ = (TempDir() / "tiny.plan").string();
    BuildPlanFile(FixturePath("tiny_op17.onnx"), SmallOpts(), plan_);
  }
  static std::string plan_;
};
std::string PlanTest::plan_;

TEST_F(PlanTest, RoundTripsAndRunsTheSame) {
  auto built = Engine::BuildFromOnnx(FixturePath("tiny_op17.onnx"), SmallOpts());
  auto loaded = Engine::Load(plan_);
  EXPECT_EQ(loaded->info().format_version, kPlanFormatVersion);
  EXPECT_EQ(loaded->info().fingerprint.at("cpu_isa"), cpu::CpuIsaString());
  EXPECT_EQ(loaded->info().ops.size(), built->info().ops.size());
  PackedBatch b{{1, 5, 6, 2, 1, 7, 2}, {}, {0, 4, 7}};
  std::vector<Output> o1, o2;
  built->CreateContext()->Run(b, &o1);
  loaded->CreateContext()->Run(b, &o2);
  ASSERT_EQ(o1.size(), 2u);
  for (size_t k = 0; k < o1.size(); ++k) EXPECT_EQ(o1[k].data, o2[k].data);
  const PlanInfo info = InspectPlan(plan_);
  EXPECT_EQ(info.profile.ToString(), "1x1:2x8:4x16");
}

TEST_F(PlanTest, ForeignTruncatedOldAndOtherHardware) {
  const auto dir = TempDir();
  ExpectError([&] { Engine::Load(FixturePath("tiny_op14.onnx")); }, {"not a hotline plan"});
  const std::string bytes = ReadAll(plan_);
  WriteAll(dir / "trunc.plan", bytes.substr(0, bytes.size() - 100));
  ExpectError([&] { Engine::Load(dir / "trunc.plan"); }, {"truncated"});
  WriteAll(dir / "trunc2.plan", bytes.substr(0, 40));
  ExpectError([&] { Engine::Load(dir / "trunc2.plan"); }, {"truncated"});
  std::string old = bytes;
  const uint32_t v0 = 0;
  std::memcpy(old.data() + 8, &v0, 4);
  WriteAll(dir / "old.plan", old);
  ExpectError([&] { Engine::Load(dir / "old.plan"); },
              {"format version 0", "reads format version " + std::to_string(kPlanFormatVersion)});
  PlanData p = ReadPlan(plan_, true);
  p.info.fingerprint["cpu_isa"] = "avx512_core_amx_fp16";
  WritePlan(p, dir / "amx.plan");
  ExpectError([&] { Engine::Load(dir / "amx.plan"); },
              {"cpu_isa avx512_core_amx_fp16", "this machine has cpu_isa " + cpu::CpuIsaString()});
}

TEST_F(PlanTest, BadBatches) {
  auto engine = Engine::Load(plan_);
  auto ctx = engine->CreateContext();
  std::vector<Output> out;
  PackedBatch too_many;
  too_many.cu_seqlens = {0};
  for (int k = 0; k < 5; ++k) {
    too_many.input_ids.insert(too_many.input_ids.end(), {1, 2});
    too_many.cu_seqlens.push_back(2 * (k + 1));
  }
  ExpectError([&] { ctx->Run(too_many, &out); }, {"batch 5", "[1, 4]"});
  PackedBatch too_long{std::vector<int32_t>(17, 3), {}, {0, 17}};
  ExpectError([&] { ctx->Run(too_long, &out); }, {"sequence length 17", "[1, 16]"});
  ExpectError([&] { ctx->Run(PackedBatch{{1, 2}, {}, {0, 3}}, &out); }, {"input_ids has 2"});
  ExpectError([&] { ctx->Run(PackedBatch{{1, 2}, {}, {0, 0, 2}}, &out); }, {"empty"});
  ExpectError([&] { ctx->Run(PackedBatch{{1, 999}, {}, {0, 2}}, &out); }, {"token id 999"});
  ExpectError([&] { ctx->Run(PackedBatch{{1, 2}, {0, 5}, {0, 2}}, &out); }, {"token type 5"});
  ExpectError([&] { ctx->Run(PackedBatch{}, &out); }, {"cu_seqlens"});
  // Padded input: wrong dtype, missing input, unknown input, ragged mask.
  Tensor ids{Tensor::DType::kI64, {1, 3}, {}, {1, 5, 2}};
  Tensor fids{Tensor::DType::kF32, {1, 3}, {1, 5, 2}, {}};
  ExpectError([&] { ctx->RunPadded({{"input_ids", fids}}); }, {"input_ids", "float32"});
  ExpectError([&] { ctx->RunPadded({{"attention_mask", ids}}); }, {"missing input 'input_ids'"});
  ExpectError([&] { ctx->RunPadded({{"input_ids", ids}, {"pixels", ids}}); }, {"unknown input"});
  Tensor holes{Tensor::DType::kI64, {1, 3}, {}, {1, 0, 1}};
  ExpectError([&] { ctx->RunPadded({{"input_ids", ids}, {"attention_mask", holes}}); },
              {"attention_mask row 0"});
  Tensor bad_shape{Tensor::DType::kI64, {1, 3}, {}, {1, 5}};
  ExpectError([&] { ctx->RunPadded({{"input_ids", bad_shape}}); }, {"[batch, seq]"});
}

}  // namespace
}  // namespace hotline::engine
