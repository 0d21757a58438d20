// `hotline inspect M.onnx|M.plan [--json]`: what a model or plan holds.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/engine.h"
#include "engine/onnx_import.h"
#include "engine/plan.h"
#include "engine/runtime.h"

namespace {

using json = nlohmann::json;

struct Options {
  std::string path;
  bool json = false;
  bool explain = false;
};

// Why the encoder is (not) fused: the patterns that did not apply, each at its node.
void PrintExplain(const json& extra, const std::string& mode) {
  std::printf("fusion: %s\n", mode == "packed" ? "packed (fused encoder)" : "UNFUSED (padded generic)");
  if (extra.contains("padded_reason")) {
    std::printf("  reason: %s\n", extra["padded_reason"].get<std::string>().c_str());
  }
  if (extra.contains("fusion_notes")) {
    for (const auto& n : extra["fusion_notes"]) std::printf("  not applied: %s\n", n.get<std::string>().c_str());
  } else {
    std::printf("  every pattern that was tried applied\n");
  }
  if (extra.contains("fusion_check_rel_err")) {
    std::printf("  fused graph vs reference on the probe: rel err %.2e\n",
                extra["fusion_check_rel_err"].get<double>());
  }
}

bool IsPlan(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  f.read(magic, 8);
  return f && std::memcmp(magic, hotline::engine::kPlanMagic, 8) == 0;
}

void PrintHistogram(const char* title, const json& h) {
  int total = 0;
  for (const auto& [op, n] : h.items()) total += n.get<int>();
  std::printf("%s: %d ops\n", title, total);
  for (const auto& [op, n] : h.items()) std::printf("  %-22s %d\n", op.c_str(), n.get<int>());
}

hotline::cli::Registrar reg("inspect", "Show what an ONNX model or a plan holds", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("path", o->path, "model.onnx or model.plan")->required();
  app.add_flag("--json", o->json, "one JSON object");
  app.add_flag("--explain", o->explain,
               "say which fusion patterns did not apply, and at which node (builds an ONNX model "
               "in memory)");
  return [o]() -> int {
    using namespace hotline::engine;
    json j;
    json before, after, extra;
    std::string mode;
    if (IsPlan(o->path)) {
      const PlanData p = ReadPlan(o->path, false);
      j["kind"] = "plan";
      j["format_version"] = p.info.format_version;
      j["fingerprint"] = p.info.fingerprint;
      j["precision"] = PrecisionName(p.info.precision);
      j["backend"] = BackendName(p.info.backend);
      j["profile"] = p.info.profile.ToString();
      j["mode"] = p.mode;
      j["weight_bytes"] = p.info.weight_bytes;
      j["ops"] = json::array();
      for (const auto& op : p.info.ops) {
        j["ops"].push_back({{"name", op.name}, {"type", op.type}, {"precision", op.precision}});
      }
      for (const auto& oi : p.info.outputs) {
        j["outputs"].push_back({{"name", oi.name}, {"inner_shape", oi.inner_shape},
                                {"kind", oi.kind == Output::Kind::kPerToken ? "per_token"
                                                                          : "per_sequence"}});
      }
      j["inputs"] = p.info.input_names;
      j["build"] = p.extra;
      before = p.extra.value("ops_imported", json::object());
      after = p.extra.value("ops_fused", json::object());
      mode = p.mode;
      extra = p.extra;
    } else {
      const Graph g = ImportOnnx(o->path);
      j["kind"] = "onnx";
      j["format_version"] = nullptr;
      j["fingerprint"] = json::object();
      j["precision"] = "fp32";
      j["opset"] = g.opset;
      j["producer"] = g.producer;
      j["ops"] = json::array();
      for (const auto& n : g.nodes) {
        j["ops"].push_back({{"name", n.name}, {"type", n.op}, {"precision", "fp32"}});
      }
      for (const auto& [op, n] : g.OpHistogram()) before[op] = n;
      if (!o->json || o->explain) {  // the histogram after fusion needs an in-memory build
        BuildOptions opts;
        opts.tune = false;
        opts.profile = Profile{1, 1, 1, 1, 1, 1};
        const PlanData p = BuildPlanData(o->path, opts);
        after = p.mode == "packed" ? p.extra.value("ops_fused", json::object()) : before;
        mode = p.mode;
        extra = p.extra;
        if (o->json) {
          j["mode"] = mode;
          j["build"] = extra;
        }
        if (!o->explain && p.extra.contains("padded_reason")) {
          std::printf("not fused: %s\n", p.extra["padded_reason"].get<std::string>().c_str());
        }
      }
    }
    if (o->json) {
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    if (o->explain) {
      PrintExplain(extra, mode);
      return 0;
    }
    std::printf("%s: %s", o->path.c_str(), j["kind"].get<std::string>().c_str());
    if (j["kind"] == "plan") {
      std::printf(" format %u, %s, %s, profile %s, %s", j["format_version"].get<unsigned>(),
                  j["precision"].get<std::string>().c_str(), j["backend"].get<std::string>().c_str(),
                  j["profile"].get<std::string>().c_str(), mode.c_str());
      for (const auto& [k, v] : j["fingerprint"].items()) {
        std::printf(", %s=%s", k.c_str(), v.get<std::string>().c_str());
      }
    } else {
      std::printf(" opset %lld", static_cast<long long>(j["opset"].get<int64_t>()));
    }
    std::printf("\n");
    PrintHistogram("before fusion", before);
    PrintHistogram(("after fusion (" + mode + ")").c_str(), after);
    return 0;
  };
});

}  // namespace
