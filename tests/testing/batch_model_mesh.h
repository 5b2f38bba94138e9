// A (batch, model) mesh on a runtime's first batch * model devices, as the example models (the
// GPT, the Llama) lay themselves out on.
//
//   Runtime rt({.num_cpu_devices = 4});
//   GptModel model(config, testing::batch_model_mesh(2, 2, rt), &rt);
#pragma once

#include <string>
#include <vector>

#include "tessel/mesh/mesh.h"
#include "tessel/runtime/runtime.h"

namespace tessel::testing {

inline Mesh batch_model_mesh(int64_t batch, int64_t model, const Runtime& rt) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < batch * model; ++i)
    names.push_back(rt.device(static_cast<int>(i)).name());
  return Mesh::create_on_devices({{"batch", batch}, {"model", model}}, names);
}

}  // namespace tessel::testing
