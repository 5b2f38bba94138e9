// LanguageModel: what the example models share on a (batch, model) mesh: the registry of their
// parameters (names, global shapes, layouts, initialisation), the token ids' layout and the
// mean next-token cross-entropy. A model derives from it, registers its parameters in its
// constructor and writes logits(); GptModel (gpt_model.h) and llama::LlamaModel
// (examples/llama/llama_model.h) are two. LanguageModelTrainer (language_model_trainer.h)
// trains any of them.
//
//   class MyModel : public LanguageModel {
//    public:
//     MyModel(Mesh mesh) : LanguageModel("my_model", std::move(mesh), nullptr) {
//       w_ = add_parameter("w", Shape{65, 32}, {model_dim(), unsharded()}, 0.02);
//     }
//     DTensor logits(...) const override;
//   };
//
// Mesh dimensions: `batch` and `model` are looked up by name; a missing one counts as size 1
// (its spec is tessel::kUnsharded). Token ids are laid out with their rows over `batch`.
//
// Fully sharded parameters (`fsdp`, ZeRO-3; docs/memory.md, "Fully sharded parameters"): each
// parameter is stored (layouts()) with one more axis sharded over `batch`, the first one its
// compute layout (compute_layouts(): the tensor-parallel one) does not shard over `model`, in
// uneven blocks where the size does not divide. A model takes each parameter through
// gathered() just before it uses it: a relayout to its compute layout (an all-gather over
// `batch`) that the gradient tape records, so its gradient, a Partial sum over `batch`, is
// reduce-scattered back to the stored shard in the backward pass (a block's parameters gathered
// together are gathered and reduce-scattered in one collective each). The optimizer's state follows
// the stored layouts. Without a `batch` dimension of size > 1, fsdp changes nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/dtensor/dtensor.h"
#include "tessel/mesh/layout.h"
#include "tessel/runtime/runtime.h"

namespace tessel::gpt {

struct ForwardOptions {
  bool training = false;      // dropout on (for models that have it)
  uint64_t dropout_seed = 0;  // a new one per step: masks keyed by (seed, site, global index)
};

// x @ w (w^T when transpose_w) with the matmul in `dtype` (TrainingConfig::dtype): f32 as it
// is; for bf16 both cast to bf16, the product (f32 sums, rounded to bf16) cast back to f32; for
// f16 likewise with gemm_f16's product. The weight's gradient comes back in f32 (cast's VJP).
DTensor mixed_matmul(const DTensor& x, const DTensor& w, DType dtype, bool transpose_w = false);

// Causal self-attention of q, k, v [B, T, heads, D] (the GPT's and the Llama's): one
// causal_attention op when `fused`, else the composed ops on the [B, heads, T, D] transposes
// (matmul, causal_softmax, dropout where rate > 0, matmul). The same dropout mask; the two agree
// within float rounding. Output [B, T, heads, D].
DTensor causal_self_attention(const DTensor& q, const DTensor& k, const DTensor& v, double scale,
                              bool fused, double rate = 0.0, uint64_t seed = 0);

// The global value of `t` on the host of every process: gathered first (a replicated relayout)
// when the mesh spans several processes, whose to_host sees only local blocks.
Tensor host_value(const DTensor& t);

class LanguageModel {
 public:
  // `component` names the model in errors ("gpt"); runtime null: Runtime::global(); fsdp:
  // parameters stored sharded over `batch` as well (above).
  LanguageModel(std::string component, Mesh mesh, Runtime* runtime, bool fsdp = false);
  virtual ~LanguageModel() = default;

  const Mesh& mesh() const { return mesh_; }
  Runtime* runtime() const { return runtime_; }
  // Parameter names in registration order, their global shapes and their stored layouts;
  // params vectors follow this order.
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<Shape>& shapes() const { return shapes_; }
  const std::vector<Layout>& layouts() const { return layouts_; }
  // The layouts the forward pass uses the parameters in: layouts() without fsdp.
  const std::vector<Layout>& compute_layouts() const { return compute_layouts_; }
  bool fsdp() const { return fsdp_; }
  // Index of a parameter by name (kNotFound naming it).
  size_t index(const std::string& name) const;

  // Every parameter normal(0, its init stddev), or ones where that is 0; the random values are
  // keyed by (seed, parameter index, global element index): the same on every mesh.
  std::vector<DTensor> init(uint64_t seed) const;
  // Parameter `index` of init(seed) alone (a pipeline stage makes only its own).
  DTensor init_parameter(size_t index, uint64_t seed) const;
  // Host arrays (f32 or f64) laid out as the parameters (for loading a reference or checkpoint);
  // a wrong count or shape: kInvalidArgument naming the parameter.
  std::vector<DTensor> from_host(const std::vector<Tensor>& values) const;

  // The context length and vocabulary size of the model.
  virtual int block_size() const = 0;
  virtual int vocab_size() const = 0;
  // Token ids [B, T] (host, i32) as the activations' layout: rows over `batch`.
  DTensor tokens(const Tensor& ids) const;
  // Logits [B, T, V] for token ids [B, T] (on the mesh, as tokens() lays them out).
  virtual DTensor logits(const std::vector<DTensor>& params, const DTensor& idx,
                         const ForwardOptions& options = {}) const = 0;
  // Mean cross-entropy of next-token prediction over every position.
  DTensor loss(const std::vector<DTensor>& params, const DTensor& idx, const DTensor& targets,
               const ForwardOptions& options = {}) const;

 protected:
  // Registers a parameter (init_stddev 0: ones) whose compute layout is `specs`; returns its
  // index in the params vectors.
  size_t add_parameter(std::string name, Shape shape, const std::vector<std::string>& specs,
                       double init_stddev);
  // Parameter `index` (stored in layouts()[index]) in its compute layout: `param` itself without
  // fsdp, else its all-gather over `batch`, recorded on the gradient tape (its VJP
  // reduce-scatters the gradient). Call it where the parameter is used, inside what
  // recompute_grad recomputes, so that the gathered copy lives no longer than its uses need.
  DTensor gathered(const DTensor& param, size_t index) const;
  // gathered() of several parameters at once (params[i] stored as indices[i]): with fsdp one
  // fused all-gather for all of them (relayout_batch), and in the backward pass the tape
  // reduce-scatters their gradients together, one collective instead of one per parameter.
  std::vector<DTensor> gathered(const std::vector<DTensor>& params,
                                const std::vector<size_t>& indices) const;
  // The mesh dimension's name, or tessel::kUnsharded when the mesh lacks it.
  const std::string& batch_dim() const { return batch_dim_; }
  const std::string& model_dim() const { return model_dim_; }
  static const std::string& unsharded();
  // The size of the `model` dimension (1 without one).
  int64_t model_size() const;
  // kInvalidArgument naming both unless n_head is a multiple of the model size (heads are
  // split whole over `model`).
  void require_whole_heads(int n_head) const;
  // kInvalidArgument unless params holds every parameter and idx is [B, T] with T <=
  // block_size(); returns T.
  int64_t check_inputs(const std::vector<DTensor>& params, const DTensor& idx) const;
  const std::string& component() const { return component_; }

 private:
  std::string component_;
  Mesh mesh_;
  Runtime* runtime_;
  std::string batch_dim_, model_dim_;
  std::vector<std::string> names_;
  std::vector<Shape> shapes_;
  std::vector<Layout> layouts_;          // stored
  std::vector<Layout> compute_layouts_;  // used by the forward pass
  bool fsdp_;
  std::vector<double> init_stddev_;  // 0: ones
};

}  // namespace tessel::gpt
