// LanguageModel: the parameter registry, token layout and loss the example models share
// (language_model.h).
#include "language_model.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "tessel/core/error.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/sharding_spec.h"

namespace tessel::gpt {
namespace {

std::string dim_or_unsharded(const Mesh& mesh, const std::string& name) {
  for (const std::string& d : mesh.dim_names()) {
    if (d == name) return name;
  }
  return std::string(kUnsharded);
}

}  // namespace

Tensor host_value(const DTensor& t) {
  return to_host(relayout(t, Layout::replicated(t.layout().mesh(), t.rank())));
}

LanguageModel::LanguageModel(std::string component, Mesh mesh, Runtime* runtime, bool fsdp)
    : component_(std::move(component)),
      mesh_(std::move(mesh)),
      runtime_(runtime != nullptr ? runtime : &Runtime::global()),
      batch_dim_(dim_or_unsharded(mesh_, "batch")),
      model_dim_(dim_or_unsharded(mesh_, "model")),
      fsdp_(fsdp && batch_dim_ != unsharded() && mesh_.dim_size(batch_dim_) > 1) {}

const std::string& LanguageModel::unsharded() {
  static const std::string spec(kUnsharded);
  return spec;
}

int64_t LanguageModel::model_size() const {
  return model_dim_ == unsharded() ? 1 : mesh_.dim_size(model_dim_);
}

void LanguageModel::require_whole_heads(int n_head) const {
  if (n_head % model_size() != 0) {
    throw Error(ErrorCode::kInvalidArgument, component_,
                fmt::format("n_head {} is not a multiple of the model dimension's size {}: "
                            "heads are split whole",
                            n_head, model_size()));
  }
}

size_t LanguageModel::add_parameter(std::string name, Shape shape,
                                    const std::vector<std::string>& specs, double init_stddev) {
  names_.push_back(std::move(name));
  shapes_.push_back(std::move(shape));
  compute_layouts_.push_back(Layout(specs, mesh_));
  // fsdp: the first unsharded axis (one that the compute layout does not shard over `model`)
  // is sharded over `batch` too; a parameter with none stays as it is.
  std::vector<std::string> stored = specs;
  auto axis = std::find(stored.begin(), stored.end(), unsharded());
  if (fsdp_ && axis != stored.end()) *axis = batch_dim_;
  layouts_.push_back(Layout(stored, mesh_));
  init_stddev_.push_back(init_stddev);
  return names_.size() - 1;
}

DTensor LanguageModel::gathered(const DTensor& param, size_t index) const {
  const Layout& compute = compute_layouts_.at(index);
  return param.layout() == compute ? param : relayout(param, compute);
}

DTensor causal_self_attention(const DTensor& q, const DTensor& k, const DTensor& v, double scale,
                              bool fused, double rate, uint64_t seed) {
  if (fused) return causal_attention(q, k, v, scale, rate, seed);
  const auto swap = [](const DTensor& x) { return transpose(x, {0, 2, 1, 3}); };
  DTensor att = causal_softmax(matmul(swap(q), swap(k), false, true), scale);
  if (rate > 0) att = dropout(att, rate, seed);
  return swap(matmul(att, swap(v)));
}

DTensor mixed_matmul(const DTensor& x, const DTensor& w, DType dtype, bool transpose_w) {
  if (dtype == DType::kF32) return matmul(x, w, false, transpose_w);
  return cast(matmul(cast(x, dtype), cast(w, dtype), false, transpose_w), DType::kF32);
}

std::vector<DTensor> LanguageModel::gathered(const std::vector<DTensor>& params,
                                             const std::vector<size_t>& indices) const {
  if (params.size() != indices.size()) {
    throw Error(
        ErrorCode::kInvalidArgument, component_,
        fmt::format("gathered: {} parameters but {} indices", params.size(), indices.size()));
  }
  std::vector<DTensor> out = params;
  std::vector<DTensor> moving;
  std::vector<Layout> layouts;
  std::vector<size_t> where;
  for (size_t i = 0; i < params.size(); ++i) {
    const Layout& compute = compute_layouts_.at(indices[i]);
    if (params[i].layout() == compute) continue;
    moving.push_back(params[i]);
    layouts.push_back(compute);
    where.push_back(i);
  }
  if (moving.empty()) return out;
  const std::vector<DTensor> moved = relayout_batch(moving, layouts);
  for (size_t j = 0; j < where.size(); ++j) out[where[j]] = moved[j];
  return out;
}

size_t LanguageModel::index(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return i;
  }
  throw Error(ErrorCode::kNotFound, component_, "no parameter named '" + name + "'");
}

std::vector<DTensor> LanguageModel::init(uint64_t seed) const {
  std::vector<DTensor> params;
  for (size_t i = 0; i < names_.size(); ++i) params.push_back(init_parameter(i, seed));
  return params;
}

DTensor LanguageModel::init_parameter(size_t i, uint64_t seed) const {
  if (init_stddev_.at(i) == 0) return ones(shapes_[i], layouts_[i], DType::kF32, runtime_);
  return random_normal(shapes_[i], layouts_[i], seed * 1000 + i, 0.0, init_stddev_[i], DType::kF32,
                       runtime_);
}

std::vector<DTensor> LanguageModel::from_host(const std::vector<Tensor>& values) const {
  if (values.size() != names_.size()) {
    throw Error(ErrorCode::kInvalidArgument, component_,
                fmt::format("{} values for {} parameters", values.size(), names_.size()));
  }
  std::vector<DTensor> params;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].shape() != shapes_[i]) {
      throw Error(ErrorCode::kInvalidArgument, component_,
                  fmt::format("{} is {}, expected {}", names_[i], values[i].shape().to_string(),
                              shapes_[i].to_string()));
    }
    params.push_back(copy_to_mesh(values[i], layouts_[i], *runtime_));
  }
  return params;
}

DTensor LanguageModel::tokens(const Tensor& ids) const {
  return copy_to_mesh(ids, Layout({batch_dim_, unsharded()}, mesh_), *runtime_);
}

int64_t LanguageModel::check_inputs(const std::vector<DTensor>& params, const DTensor& idx) const {
  if (params.size() != names_.size()) {
    throw Error(ErrorCode::kInvalidArgument, component_,
                fmt::format("{} parameters given, the model has {}", params.size(), names_.size()));
  }
  if (idx.rank() != 2) {
    throw Error(ErrorCode::kInvalidArgument, component_,
                fmt::format("idx must be [B, T] token ids (rank 2), got {} (rank {})",
                            idx.shape().to_string(), idx.rank()));
  }
  const int64_t t = idx.shape().dim(1);
  if (t > block_size()) {
    throw Error(ErrorCode::kInvalidArgument, component_,
                fmt::format("idx must be [B, T] with T <= block_size {}, got {}", block_size(),
                            idx.shape().to_string()));
  }
  return t;
}

DTensor LanguageModel::loss(const std::vector<DTensor>& params, const DTensor& idx,
                            const DTensor& targets, const ForwardOptions& options) const {
  return reduce_mean(
      sparse_softmax_cross_entropy_with_logits(targets, logits(params, idx, options)));
}

}  // namespace tessel::gpt
