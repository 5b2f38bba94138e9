#include "llama_reference.h"

#include "llama_model.h"
#include "tessel/checkpoint/safetensors.h"

namespace tessel::llama {

gpt::ReferenceErrors check_reference(const std::string& path, const Mesh& mesh, DType dtype,
                                     Runtime* runtime) {
  const SafetensorsFile ref = SafetensorsFile::read(path);
  LlamaConfig config = LlamaConfig::preset("test");
  gpt::ReferenceErrors errors = gpt::check_model(LlamaModel(config, mesh, runtime), ref, dtype);
  config.tie_embeddings = true;
  errors.include(gpt::check_model(LlamaModel(config, mesh, runtime), ref, dtype, "tied.",
                                  /*steps=*/false),
                 "tied.");
  return errors;
}

}  // namespace tessel::llama
