#include "nlu/int8_folder.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/temp_dir.h"
#include "engine/cpu/kernels.h"
#include "engine/qdq_build.h"
#include "engine/quant.h"
#include "nlu/gate.h"
#include "nlu/gate_eval.h"

namespace hotline::nlu {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "hotline-int8-calibration-1";

std::string CalibrateCommand(const ModelConfig& c) {
  return "hotline calibrate --model " + c.dir + " --calib CALIB.jsonl --gate HELD_OUT.jsonl";
}

// How a folder without calibration gets one, in words.
std::string HowToCalibrate(const ModelConfig& c) {
  if (c.kind != "joint")
    return "hotline calibrate gates joint models; a " + c.kind +
           " folder has no INT8 calibration of its own (`hotline build --precision int8 "
           "--calib` builds a plan from call text)";
  return "make it with `" + CalibrateCommand(c) + "`";
}

int QmaxOf(const std::string& weight_class) {
  if (weight_class == "w8") return 127;
  if (weight_class == "w7") return 63;
  throw Error("INT8 weight class must be w8 (VNNI, AMX) or w7 (AVX2), got '" + weight_class + "'");
}

const char* ClassWords(const std::string& weight_class) {
  return weight_class == "w8" ? "8-bit weights (AVX512-VNNI/AMX CPUs)"
                              : "7-bit weights (AVX2 CPUs without VNNI)";
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(' '));
        return v;
      }
    }
  }
  return "unknown";
}

std::string Percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", 100 * share);
  return buf;
}

json ClassJson(const Int8ClassResult& r) {
  return {{"passed", r.passed},
          {"keep_fp", r.keep_fp},
          {"intent_agreement", r.intent_agreement},
          {"fp32_intent_accuracy", r.fp32_intent_accuracy},
          {"int8_intent_accuracy", r.int8_intent_accuracy},
          {"fp32_slot_f1", r.fp32_slot_f1},
          {"int8_slot_f1", r.int8_slot_f1},
          {"message", r.message},
          {"steps", r.steps}};
}

FolderInt8 FromJson(const json& j, const std::string& path) {
  FolderInt8 f;
  f.path = path;
  f.doc = j;
  try {
    if (j.at("format") != kFormat)
      throw Error(path + ": format " + j.at("format").dump() + ", expected \"" + kFormat + "\"");
    f.onnx_fnv1a = j.at("onnx_fnv1a").get<std::string>();
    f.table = std::make_shared<const engine::CalibrationTable>(
        engine::CalibrationTable::FromJson(j.at("table")));
    const json& g = j.at("gate");
    f.gate_n = g.at("n").get<int>();
    f.min_intent_agreement = g.at("min_intent_agreement").get<double>();
    f.gate_data = g.value("data", "");
    for (const auto& [name, c] : j.at("classes").items()) {
      QmaxOf(name);  // a known class
      Int8ClassResult r;
      r.passed = c.at("passed").get<bool>();
      r.keep_fp = c.at("keep_fp").get<std::vector<std::string>>();
      r.intent_agreement = c.at("intent_agreement").get<double>();
      r.fp32_intent_accuracy = c.value("fp32_intent_accuracy", 0.0);
      r.int8_intent_accuracy = c.value("int8_intent_accuracy", 0.0);
      r.fp32_slot_f1 = c.value("fp32_slot_f1", 0.0);
      r.int8_slot_f1 = c.value("int8_slot_f1", 0.0);
      r.message = c.value("message", "");
      r.steps = c.value("steps", json::array());
      f.classes.emplace_back(name, std::move(r));
    }
  } catch (const Error& e) {
    throw Error(std::string(e.what()).rfind(path, 0) == 0 ? e.what() : path + ": " + e.what(),
                Code::kInvalidArgument);
  } catch (const std::exception& e) {
    throw Error(path + ": malformed INT8 calibration (" + e.what() + "); rerun hotline calibrate",
                Code::kInvalidArgument);
  }
  return f;
}

}  // namespace

std::string CpuInt8WeightClass() { return engine::cpu::S8WeightQmax() >= 127 ? "w8" : "w7"; }

const Int8ClassResult* FolderInt8::Class(const std::string& weight_class) const {
  for (const auto& [name, r] : classes)
    if (name == weight_class) return &r;
  return nullptr;
}

std::string FileFnv1a(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "'", Code::kNotFound);
  uint64_t h = 1469598103934665603ull;
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i)
      h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::optional<FolderInt8> LoadFolderInt8(const ModelConfig& config) {
  const std::string path = (fs::path(config.dir) / kInt8CalibrationFile).string();
  if (!fs::exists(path)) return std::nullopt;
  std::ifstream in(path);
  if (!in) throw Error("cannot read '" + path + "'", Code::kPermissionDenied);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + " is not valid JSON: " + e.what(), Code::kInvalidArgument);
  }
  return FromJson(j, path);
}

std::string ApplyFolderInt8(const ModelConfig& config, engine::BuildOptions* o) {
  if (o->precision != engine::Precision::kINT8 || o->backend != engine::BackendKind::kCPU)
    return "";
  if (o->calib_table || !o->calib_file.empty() || !o->calib_cache.empty() ||
      !o->calib_sequences.empty())
    return "";
  const auto f = LoadFolderInt8(config);
  if (!f) {
    engine::BuildOptions probe = *o;
    if (engine::ApplyQdqScales(config.onnx_file, &probe)) return "";  // the model's own scales
    throw Error("model folder '" + config.dir + "' has no INT8 calibration (" +
                    kInt8CalibrationFile + "): " + HowToCalibrate(config),
                Code::kFailedPrecondition);
  }
  if (f->onnx_fnv1a != FileFnv1a(config.onnx_file))
    throw Error(f->path + " was made for another " +
                    fs::path(config.onnx_file).filename().string() +
                    " (the model changed since): rerun `" + CalibrateCommand(config) + "`",
                Code::kFailedPrecondition);
  const std::string cls = CpuInt8WeightClass();
  const Int8ClassResult* r = f->Class(cls);
  if (!r)
    throw Error(f->path + " has no gate result for " + ClassWords(cls) +
                    ", which this CPU runs: rerun `" + CalibrateCommand(config) +
                    "` on a CPU with AVX512-VNNI (it gates both classes) or on this one",
                Code::kFailedPrecondition);
  if (!r->passed)
    std::fprintf(stderr,
                 "hotline: warning: the INT8 accuracy gate of %s FAILED for %s (intent "
                 "agreement %s, needed %.2f%%); loading INT8 as asked\n",
                 f->path.c_str(), ClassWords(cls), Percent(r->intent_agreement).c_str(),
                 f->min_intent_agreement);
  o->calib_table = f->table;
  o->keep_fp = r->keep_fp;
  return FileFnv1a(f->path);
}

bool FolderInt8Usable(const ModelConfig& config, std::string* why) {
  std::optional<FolderInt8> f;
  try {
    f = LoadFolderInt8(config);
  } catch (const Error& e) {
    *why = std::string("its INT8 calibration is unreadable (") + e.what() + ")";
    return false;
  }
  if (!f) {
    *why = std::string("the folder has no INT8 calibration (") + kInt8CalibrationFile + "; " +
           HowToCalibrate(config) + ")";
    return false;
  }
  std::string hash;
  try {
    hash = FileFnv1a(config.onnx_file);
  } catch (const Error& e) {
    *why = std::string("its ONNX file cannot be read to check the INT8 calibration (") +
           e.what() + ")";
    return false;
  }
  if (f->onnx_fnv1a != hash) {
    *why = std::string(kInt8CalibrationFile) + " was made for another model.onnx (rerun `" +
           CalibrateCommand(config) + "`)";
    return false;
  }
  const std::string cls = CpuInt8WeightClass();
  const Int8ClassResult* r = f->Class(cls);
  if (!r) {
    *why = std::string("the folder's INT8 gate was not run for ") + ClassWords(cls) +
           ", which this CPU runs";
    return false;
  }
  char buf[256];
  std::snprintf(buf, sizeof(buf), "intent agreement with fp32 %s on %d held-out utterances (%s), "
                "gate >= %.2f%%",
                Percent(r->intent_agreement).c_str(), f->gate_n, f->gate_data.c_str(),
                f->min_intent_agreement);
  if (!r->passed) {
    *why = std::string("the folder's INT8 gate failed for ") + ClassWords(cls) + ": " + buf;
    return false;
  }
  // A gate run with a lower bar (--min-intent-agreement) serves `--precision int8` but not auto.
  if (100 * r->intent_agreement < kDefaultMinIntentAgreement - 1e-9) {
    char a[64];
    std::snprintf(a, sizeof(a), "%.2f%%", kDefaultMinIntentAgreement);
    *why = std::string("the folder's INT8 gate passed for ") + ClassWords(cls) +
           " at a lower bar (" + buf + "), below the " + a + " auto needs";
    return false;
  }
  *why = std::string("the folder's INT8 gate passed for ") + ClassWords(cls) + ": " + buf +
         (r->keep_fp.empty() ? "" : ", " + std::to_string(r->keep_fp.size()) +
                                        " layer(s) kept in fp32");
  return true;
}

engine::Precision ChooseAutoPrecision(const ModelConfig& config, engine::BackendKind backend,
                                      std::string* why) {
  std::string reason;
  engine::Precision p = engine::Precision::kFP32;
  if (backend == engine::BackendKind::kCUDA) {
    p = engine::Precision::kFP16;
    reason = "cuda backend: fp16";
  } else if (std::string int8_why; FolderInt8Usable(config, &int8_why)) {
    p = engine::Precision::kINT8;
    reason = int8_why + ": int8";
  } else if (engine::cpu::CpuHasAmxBf16()) {
    p = engine::Precision::kBF16;
    reason = "no int8 (" + int8_why + "); this CPU has AMX-BF16: bf16";
  } else {
    reason = "no int8 (" + int8_why +
             "); this CPU has no AMX-BF16 (bf16 would run slower than fp32): fp32";
  }
  if (why) *why = reason;
  return p;
}

engine::Precision ResolvePrecision(const std::string& requested, const ModelConfig& config,
                                   engine::BackendKind backend) {
  if (requested.empty()) return engine::ParsePrecision(config.precision);
  if (requested != "auto") return engine::ParsePrecision(requested);
  std::string why;
  const engine::Precision p = ChooseAutoPrecision(config, backend, &why);
  std::fprintf(stderr, "hotline: precision auto for %s: %s\n", config.name.c_str(), why.c_str());
  return p;
}

FolderInt8 CalibrateFolder(const CalibrateOptions& o) {
  const ModelConfig config = ModelConfig::Load(o.model_dir);
  if (config.kind != "joint")
    throw Error("hotline calibrate gates intent agreement of a joint model; '" + o.model_dir +
                "' is a " + config.kind + " folder");
  if (!fs::exists(config.onnx_file))
    throw Error("model folder '" + o.model_dir + "' has no ONNX file '" + config.onnx_file + "'",
                Code::kNotFound);
  if (o.calib.empty() || o.gate.empty())
    throw Error("hotline calibrate needs --calib (call text) and --gate (held-out labelled set)");
  if (!(o.min_intent_agreement >= 0 && o.min_intent_agreement <= 100))
    throw Error("--min-intent-agreement is a percentage in [0, 100]");
  std::vector<std::string> classes = o.classes;
  const bool vnni = engine::cpu::S8WeightQmax() >= 127;
  if (classes.empty()) classes = vnni ? std::vector<std::string>{"w8", "w7"}
                                      : std::vector<std::string>{"w7"};
  for (const auto& c : classes) {
    if (QmaxOf(c) > engine::cpu::S8WeightQmax())
      throw Error("this CPU has no AVX512-VNNI and cannot run the " + c + " class (" +
                  ClassWords(c) + "); calibrate it on a VNNI CPU");
  }
  const engine::Profile profile = ModelProfile(config);
  const TempDir scratch("hotline-calibrate");
  const fs::path& work = scratch.path();
  auto cut = [&](const std::string& src, int lines, const std::string& name) {
    if (lines <= 0) return src;
    std::ifstream in(src);
    if (!in) throw Error("cannot open '" + src + "'", Code::kNotFound);
    const std::string dst = (work / name).string();
    std::ofstream out(dst);
    std::string l;
    for (int k = 0; k < lines && std::getline(in, l); ++k) out << l << "\n";
    return dst;
  };
  const std::string calib = cut(o.calib, o.calib_lines, "calib.jsonl");
  const std::string gate = cut(o.gate, o.gate_lines, "gate.jsonl");
  const int gate_n = int(ReadLabelled(gate).size());  // fails early on a bad file

  engine::BuildOptions b;
  b.precision = engine::Precision::kINT8;
  b.backend = engine::BackendKind::kCPU;
  b.profile = profile;
  b.tune = o.tune;
  b.calib_method = o.method;
  b.calib_percentile = o.percentile;
  std::fprintf(stderr, "hotline calibrate: activation ranges (%s) on %s\n",
               std::string(engine::CalibMethodName(o.method)).c_str(), o.calib.c_str());
  const auto seqs = engine::ReadCalibrationJsonl(
      calib, MakeCalibTokenizer(config, profile.max_seq), 0);
  if (seqs.empty()) throw Error("calibration text '" + o.calib + "' has no lines");
  auto table = std::make_shared<engine::CalibrationTable>(
      engine::Calibrate(config.onnx_file, b, seqs));
  table->samples = int64_t(seqs.size());
  table->calib_source = fs::path(o.calib).filename().string() + " (" +
                        std::to_string(seqs.size()) + " lines, fnv1a " + FileFnv1a(calib) + ")";
  b.calib_table = table;

  json doc = {{"format", kFormat},
              {"model", config.name},
              {"onnx_fnv1a", FileFnv1a(config.onnx_file)},
              {"table", table->ToJson()},
              {"gate",
               {{"data", fs::path(o.gate).filename().string()},
                {"data_fnv1a", FileFnv1a(gate)},
                {"n", gate_n},
                {"min_intent_agreement", o.min_intent_agreement},
                {"max_intent_drop_pp", o.max_intent_drop},
                {"max_slot_f1_drop_pp", o.max_slot_f1_drop}}},
              {"calibrated_on",
               {{"cpu", CpuModelName()},
                {"isa", engine::cpu::CpuIsaString()},
                {"hotline", o.hotline_version}}}};
  doc["classes"] = json::object();
  for (const auto& cls : classes) {
    std::fprintf(stderr, "hotline calibrate: accuracy gate for %s on %d utterances\n",
                 ClassWords(cls), gate_n);
    engine::BuildOptions ib = b;
    ib.int8_weight_qmax = QmaxOf(cls);
    GateOptions g;
    g.model_dir = o.model_dir;
    g.data = gate;
    g.min_intent_agreement = o.min_intent_agreement;
    g.max_intent_drop = o.max_intent_drop;
    g.max_slot_f1_drop = o.max_slot_f1_drop;
    g.work_dir = (work / ("gate-" + cls)).string();
    g.prune = true;  // every GEMM kept in FP32 costs serving time (PERF_NOTES.md)
    const GateReport rep = RunGate(g, ib, (work / (cls + ".plan")).string());
    Int8ClassResult r;
    r.passed = rep.passed;
    r.keep_fp = rep.keep_fp;
    r.fp32_intent_accuracy = rep.fp32_intent_accuracy;
    r.fp32_slot_f1 = rep.fp32_slot_f1;
    const GateStep* step = nullptr;
    for (const auto& s : rep.steps)
      if (s.passed) step = &s;
    if (!step && !rep.steps.empty()) step = &rep.steps.back();
    for (const auto& s : rep.steps)
      r.steps.push_back(
          {{"keep_fp", s.keep_fp}, {"intent_agreement", s.intent_agreement}, {"passed", s.passed}});
    if (step) {
      r.intent_agreement = step->intent_agreement;
      r.int8_intent_accuracy = step->intent_accuracy;
      r.int8_slot_f1 = step->slot_f1;
    }
    // The gate names its data file by the scratch path; say the data set the user gave.
    r.message = rep.message;
    const std::string shown = fs::path(o.gate).filename().string();
    for (auto pos = r.message.find(gate); pos != std::string::npos;
         pos = r.message.find(gate, pos + shown.size()))
      r.message.replace(pos, gate.size(), shown);
    std::fprintf(stderr, "hotline calibrate: %s: %s\n", cls.c_str(), r.message.c_str());
    doc["classes"][cls] = ClassJson(r);
  }
  const std::string path = (fs::path(o.model_dir) / kInt8CalibrationFile).string();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) throw Error("cannot write '" + path + "'", Code::kPermissionDenied);
    f << doc.dump(1) << "\n";
    if (!f) throw Error("error writing '" + path + "'", Code::kDataLoss);
  }
  fs::rename(tmp, path);
  return FromJson(doc, path);
}

}  // namespace hotline::nlu
