// Linked instead of pipeline_model.cc while the NLU layer (hotline_nlu) is not part of the build:
// `hotline serve` then fails loudly at model load instead of serving something else.
#include "base/error.h"
#include "serving/model.h"

namespace hotline::serving {

ModelLoader PipelineModelLoader(const PipelineModelOptions&) {
  return [](const ModelSpec& spec) -> std::unique_ptr<ServableModel> {
    throw Error("cannot load " + spec.dir +
                    ": this hotline was built without the NLU layer "
                    "(src/nlu had no sources at configure time); re-run cmake",
                Code::kUnimplemented);
  };
}

engine::Precision AutoPrecision(engine::BackendKind, const std::string&, std::string*) {
  throw Error("precision auto: this hotline was built without the NLU layer", Code::kUnimplemented);
}

}  // namespace hotline::serving
