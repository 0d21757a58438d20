// FLOAT16 / BFLOAT16 initializers: widened to float exactly at import (raw_data and the typed
// int32_data form), and Cast(to=FLOAT) of such a constant folded into a float constant. The
// reference values come from the binary16/bfloat16 definitions computed with std::ldexp, not from
// the importer's bit manipulation. tests/cli/half_ort_test.py runs whole FP16-initializer BERTs
// against ONNX Runtime.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "base/error.h"
#include "engine/onnx_import.h"

namespace hotline::engine {
namespace {

namespace fs = std::filesystem;

// binary16: sign, 5-bit exponent (bias 15), 10-bit fraction.
double HalfReference(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v;
  if (exp == 31) {
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(double(man), -24);
  } else {
    v = std::ldexp(1.0 + man / 1024.0, exp - 15);
  }
  return sign ? -v : v;
}

// bfloat16: sign, 8-bit exponent (bias 127), 7-bit fraction.
double Bf16Reference(uint16_t b) {
  const int sign = b >> 15, exp = (b >> 7) & 255, man = b & 127;
  double v;
  if (exp == 255) {
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(double(man), -133);
  } else {
    v = std::ldexp(1.0 + man / 128.0, exp - 127);
  }
  return sign ? -v : v;
}

// A model whose output y = Cast(w, to=FLOAT) + x over every 16-bit pattern in w.
onnx::ModelProto CastModel(int elem_type, bool raw, bool second_reader) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(14);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  auto* w = g->add_initializer();
  w->set_name("w16");
  w->set_data_type(elem_type);
  w->add_dims(65536);
  std::string bytes(2 * 65536, '\0');
  for (int k = 0; k < 65536; ++k) {
    const uint16_t v = uint16_t(k);
    std::memcpy(&bytes[2 * k], &v, 2);  // little-endian hosts (x86, arm64)
    if (!raw) w->add_int32_data(k);
  }
  if (raw) w->set_raw_data(bytes);
  auto* cast = g->add_node();
  cast->set_op_type("Cast");
  cast->set_name("w_cast");
  cast->add_input("w16");
  cast->add_output("w");
  auto* to = cast->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->set_name("add");
  add->add_input("x");
  add->add_input("w");
  add->add_output("y");
  if (second_reader) {  // the half-width tensor read directly too: it must stay
    auto* id = g->add_node();
    id->set_op_type("Identity");
    id->set_name("id");
    id->add_input("w16");
    id->add_output("z");
    auto* z = g->add_output();
    z->set_name("z");
    z->mutable_type()->mutable_tensor_type()->set_elem_type(elem_type);
  }
  auto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return m;
}

std::string WriteModel(const onnx::ModelProto& m, const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("hotline_half_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

void ExpectAllPatterns(const HTensor& t, double (*ref)(uint16_t), const char* what) {
  ASSERT_TRUE(t.is_float()) << what;
  ASSERT_EQ(t.f.size(), 65536u) << what;
  int wrong = 0;
  for (int k = 0; k < 65536; ++k) {
    const double want = ref(uint16_t(k));
    const float got = t.f[k];
    const bool same = std::isnan(want) ? std::isnan(got)
                                       : double(got) == want &&
                                             std::signbit(got) == std::signbit(want);
    if (!same && ++wrong <= 5)
      ADD_FAILURE() << what << ": pattern 0x" << std::hex << k << " gave " << got << ", want "
                    << want;
  }
  EXPECT_EQ(wrong, 0) << what;
}

TEST(HalfImportTest, Float16RawAndTypedWidenExactlyAndTheCastFolds) {
  for (bool raw : {true, false}) {
    const Graph g = ImportOnnx(
        WriteModel(CastModel(onnx::TensorProto::FLOAT16, raw, false), "f16.onnx"));
    // The Cast is gone, its output is a float constant, the half-width source is dropped.
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].op, "Add");
    ASSERT_TRUE(g.IsConst("w"));
    EXPECT_FALSE(g.IsConst("w16"));
    ExpectAllPatterns(*g.Const("w"), HalfReference, raw ? "fp16 raw_data" : "fp16 int32_data");
  }
}

TEST(HalfImportTest, BFloat16RawAndTypedWidenExactly) {
  for (bool raw : {true, false}) {
    const Graph g = ImportOnnx(
        WriteModel(CastModel(onnx::TensorProto::BFLOAT16, raw, false), "bf16.onnx"));
    ASSERT_EQ(g.nodes.size(), 1u);
    ASSERT_TRUE(g.IsConst("w"));
    ExpectAllPatterns(*g.Const("w"), Bf16Reference, raw ? "bf16 raw_data" : "bf16 int32_data");
  }
}

TEST(HalfImportTest, SourceReadElsewhereIsKept) {
  const Graph g =
      ImportOnnx(WriteModel(CastModel(onnx::TensorProto::FLOAT16, true, true), "f16_2.onnx"));
  EXPECT_TRUE(g.IsConst("w"));
  EXPECT_TRUE(g.IsConst("w16"));  // Identity still reads it
  EXPECT_EQ(g.nodes.size(), 2u);
}

TEST(HalfImportTest, CorruptHalfDataIsAClearError) {
  onnx::ModelProto m = CastModel(onnx::TensorProto::FLOAT16, false, false);
  m.mutable_graph()->mutable_initializer(0)->set_int32_data(7, 70000);  // not 16 bits
  const std::string bad = WriteModel(m, "f16_bad.onnx");
  try {
    ImportOnnx(bad);
    ADD_FAILURE() << "no error for a 17-bit pattern in int32_data";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w16"), std::string::npos) << e.what();
  }
  onnx::ModelProto s = CastModel(onnx::TensorProto::FLOAT16, true, false);
  s.mutable_graph()->mutable_initializer(0)->mutable_raw_data()->resize(65536 * 2 - 2);
  const std::string short_raw = WriteModel(s, "f16_short.onnx");
  try {
    ImportOnnx(short_raw);
    ADD_FAILURE() << "no error for raw_data one value short";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("131072 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotline::engine
