// The real ServableModel: an nlu::Pipeline with one engine context per batcher instance.
#include <algorithm>

#include "engine/cpu/kernels.h"
#include "nlu/int8_folder.h"
#include "serving/log.h"
#include "serving/model.h"

namespace hotline::serving {
namespace {

class PipelineModel : public ServableModel {
 public:
  explicit PipelineModel(std::unique_ptr<nlu::Pipeline> p) : pipeline_(std::move(p)) {}
  std::vector<nlu::Understanding> Understand(
      const std::vector<std::string>& texts,
      std::chrono::system_clock::time_point reference) override {
    return pipeline_->Understand(texts, reference);
  }
  int64_t memory_bytes() const override { return int64_t(pipeline_->plan_info().weight_bytes); }
  int max_length() const override { return pipeline_->config().max_length; }
  engine::Profile profile() const override { return pipeline_->plan_info().profile; }

 private:
  std::unique_ptr<nlu::Pipeline> pipeline_;
};

}  // namespace

engine::Precision AutoPrecision(engine::BackendKind backend, const std::string& model_dir,
                                std::string* why) {
  return nlu::ChooseAutoPrecision(nlu::ModelConfig::Load(model_dir), backend, why);
}

ModelLoader PipelineModelLoader(const PipelineModelOptions& options) {
  return [options](const ModelSpec& spec) -> std::unique_ptr<ServableModel> {
    nlu::PipelineOptions po;
    po.precision = options.precision;
    if (options.auto_precision) {
      std::string why;
      po.precision = AutoPrecision(options.backend, spec.dir, &why);
      Logger().Info("precision_chosen",
                    {{"model", spec.name},
                     {"requested", "auto"},
                     {"precision", std::string(engine::PrecisionName(po.precision))},
                     {"why", why}});
    }
    po.backend = options.backend;
    po.top_k = options.top_k;
    po.contexts = spec.instances;
    // The plan must take the batcher's largest batch.
    po.profile.max_batch = std::max(1, spec.batching.max_batch_size);
    po.profile.opt_batch =
        std::clamp(po.profile.opt_batch, po.profile.min_batch, po.profile.max_batch);
    return std::make_unique<PipelineModel>(nlu::Pipeline::Open(spec.dir, po));
  };
}

}  // namespace hotline::serving
