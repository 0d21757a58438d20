// `hotline infer --plan M.plan --input in.json [--output out.json]`: padded tensors as JSON in,
// one key per model output out (nested lists in the output's shape).
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/command.h"
#include "engine/engine.h"

namespace {

using json = nlohmann::json;
using hotline::engine::Tensor;

struct Options {
  std::string plan, input, output;
};

Tensor FromJson(const std::string& name, const json& j) {
  Tensor t;
  t.dtype = Tensor::DType::kI64;
  if (!j.is_array() || j.empty() || !j[0].is_array()) {
    throw hotline::Error("input '" + name + "' must be a non-empty [batch][seq] list of integers");
  }
  t.shape = {int64_t(j.size()), int64_t(j[0].size())};
  for (const auto& row : j) {
    if (!row.is_array() || int64_t(row.size()) != t.shape[1]) {
      throw hotline::Error("input '" + name + "': rows differ in length (pad them)");
    }
    for (const auto& v : row) {
      // Unsigned values past 2^63 - 1 would wrap to negative ids in get<int64_t>().
      if (!v.is_number_integer() ||
          (v.is_number_unsigned() &&
           v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))) {
        throw hotline::Error("input '" + name + "' holds " +
                             (v.is_number_integer() ? "integers past 2^63 - 1"
                                                    : std::string(v.type_name()) + " values") +
                             "; expected 64-bit integers");
      }
      t.i64.push_back(v.get<int64_t>());
    }
  }
  return t;
}

json Nested(const Tensor& t, size_t dim, int64_t* pos) {
  json a = json::array();
  for (int64_t k = 0; k < t.shape[dim]; ++k) {
    if (dim + 1 == t.shape.size()) a.push_back(t.f32[(*pos)++]);
    else a.push_back(Nested(t, dim + 1, pos));
  }
  return a;
}

hotline::cli::Registrar reg("infer", "Run a plan on JSON tensors", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--plan", o->plan, "plan file")->required();
  app.add_option("--input", o->input, "JSON with input_ids, attention_mask, token_type_ids")
      ->required();
  app.add_option("--output", o->output, "JSON file to write (default: stdout)");
  return [o]() -> int {
    std::ifstream f(o->input);
    if (!f) throw hotline::Error("cannot open input '" + o->input + "'", hotline::Code::kNotFound);
    json in;
    try {
      in = json::parse(f);
    } catch (const std::exception& e) {
      throw hotline::Error("input '" + o->input + "' is not valid JSON: " + e.what());
    }
    if (!in.is_object()) throw hotline::Error("input JSON must be an object of tensors");
    std::map<std::string, Tensor> inputs;
    for (const auto& [k, v] : in.items()) inputs[k] = FromJson(k, v);
    auto engine = hotline::engine::Engine::Load(o->plan);
    auto ctx = engine->CreateContext();
    const auto outs = ctx->RunPadded(inputs);
    json out = json::object();
    for (const auto& [name, t] : outs) {
      int64_t pos = 0;
      out[name] = Nested(t, 0, &pos);
    }
    if (o->output.empty()) {
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::ofstream w(o->output);
      w << out.dump() << "\n";
      if (!w) throw hotline::Error("cannot write '" + o->output + "'");
    }
    return 0;
  };
});

}  // namespace
