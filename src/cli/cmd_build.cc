// `hotline build`: ONNX → optimised, tuned plan file (DESIGN.md's command-line contract).
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "cli/command.h"
#include "engine/engine.h"
#include "engine/plan.h"

namespace {

struct Options {
  std::string onnx, out, precision = "fp32", backend = "cpu", profile = "1x1:8x64:64x128";
  std::string calib;
  bool no_tune = false;
  int threads = 0;
};

hotline::cli::Registrar reg("build", "Build an optimised plan from an ONNX model", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--onnx", o->onnx, "ONNX model")->required();
  app.add_option("-o,--output", o->out, "plan file to write")->required();
  app.add_option("--precision", o->precision, "fp32|fp16|bf16|int8|fp8");
  app.add_option("--backend", o->backend, "cpu|cuda");
  app.add_option("--profile", o->profile, "min:opt:max as BxS, e.g. 1x1:8x64:64x128");
  app.add_option("--calib", o->calib, "calibration text (int8)");
  app.add_flag("--no-tune", o->no_tune, "skip timing GEMM tactics");
  app.add_option("--threads", o->threads, "CPU threads (0 = all)");
  return [o]() -> int {
    using namespace hotline::engine;
    BuildOptions opts;
    opts.precision = ParsePrecision(o->precision);
    opts.backend = ParseBackend(o->backend);
    opts.profile = Profile::Parse(o->profile);
    opts.tune = !o->no_tune;
    opts.threads = o->threads;
    if (!o->calib.empty() && opts.precision != Precision::kINT8) {
      throw hotline::Error("--calib is only used with --precision int8");
    }
    BuildPlanFile(o->onnx, opts, o->out);
    const PlanData p = ReadPlan(o->out, false);
    std::fprintf(stderr, "hotline build: wrote %s (%s, %s, %zu ops, profile %s, %.1f MB weights)\n",
                 o->out.c_str(), p.mode.c_str(), std::string(PrecisionName(p.info.precision)).c_str(),
                 p.info.ops.size(), p.info.profile.ToString().c_str(),
                 double(p.info.weight_bytes) / 1e6);
    return 0;
  };
});

}  // namespace
