// The creation op family: zeros, ones, fill, random_uniform, random_normal (zero-input ops;
// OpAttrs: the shape in `shape`, the output layout in `layout`, `dtype`, `runtime`; fill's `value`,
// random_uniform's `seed`, `low`, `high`, random_normal's `seed`, `mean`, `stddev`), and
// zeros_like / ones_like (wrappers: x's shape, layout, dtype and runtime); without a layout,
// replicated on the default mesh (TF DTensor inside `with default_mesh(mesh):`).
//
// Sharding rule: the output has the requested layout; nothing moves. Each device writes only its
// block: random values come from Tensor::random_*_block at the block's global offsets, so element
// i of the global tensor depends only on (seed, i), whatever the layout or device count.
// A Partial layout holds the named value: along Partial(sum) dims the value sits on the first
// device of each group and the others hold 0; along mean / max / min / prod dims every device
// holds the value (the reduction of equal copies is the value).
#include "dtensor/framework/op_util.h"
#include "dtensor/ops/op_families.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

enum class Kind { kZeros, kOnes, kFill, kUniform, kNormal };

uint64_t seed_of(const OpAttrs& attrs) { return attrs.seed.value_or(0); }

TensorSpec infer_creation(std::string_view op, Kind kind, const OpAttrs& attrs) {
  if (!attrs.layout) throw_invalid(op, "needs an output layout");
  const Layout& layout = *attrs.layout;
  for (int64_t d : attrs.shape) {
    if (d < 0) {
      throw_invalid(op, "shape [{}] has a negative dimension", fmt::join(attrs.shape, ","));
    }
  }
  if (layout.is_empty() || layout.is_single_device()) {
    throw_invalid(op, "layout {} is not a tensor layout (empty or single-device)",
                  layout.to_string());
  }
  if (static_cast<size_t>(layout.rank()) != attrs.shape.size()) {
    throw_invalid(op, "layout {} has rank {} but shape [{}] has rank {}", layout.to_string(),
                  layout.rank(), fmt::join(attrs.shape, ","), attrs.shape.size());
  }
  for (const ShardingSpec& s : layout.sharding_specs()) {
    if (s.is_match() || s.is_any()) {
      throw_invalid(op, "layout {} has a '{}' spec; an output layout needs concrete specs",
                    layout.to_string(), s.to_string());
    }
  }
  // The random parameters are checked here, at dispatch, rather than in the kernels.
  try {
    if (kind == Kind::kUniform) {
      Tensor::random_uniform(Shape{0}, attrs.dtype, seed_of(attrs), attrs.low.value_or(0.0),
                             attrs.high.value_or(0.0));
    } else if (kind == Kind::kNormal) {
      Tensor::random_normal(Shape{0}, attrs.dtype, seed_of(attrs), attrs.mean.value_or(0.0),
                            attrs.stddev.value_or(0.0));
    }
  } catch (const Error& e) {
    throw Error(e.code(), op, e.message());
  }
  TensorSpec out;
  out.shape = Shape(attrs.shape);
  out.dtype = attrs.dtype;
  return out;
}

void add_creation(OpRegistry& registry, const char* name, Kind kind) {
  OpDef def;
  def.name = name;
  def.num_inputs = 0;
  def.infer = [name, kind](const std::vector<TensorSpec>&, const OpAttrs& attrs) {
    return infer_creation(name, kind, attrs);
  };
  def.shard = [](const std::vector<TensorSpec>&, const TensorSpec&, const OpAttrs& attrs) {
    return ShardingDecision{{}, *attrs.layout};
  };
  def.kernel = [kind](const std::vector<Tensor>&, Tensor& out, const OpAttrs& attrs,
                      const LocalContext& context) {
    if (out.num_elements() == 0) return;
    if (!first_in_sum_groups(*context.output_layout, context.mesh_offset)) {
      out.fill(0.0);
      return;
    }
    const Box& b = context.output_block;
    switch (kind) {
      case Kind::kZeros:
        out.fill(0.0);
        break;
      case Kind::kOnes:
        out.fill(1.0);
        break;
      case Kind::kFill:
        out.fill(attrs.value.value_or(0.0));
        break;
      case Kind::kUniform:
        out.copy_from(Tensor::random_uniform_block(
            context.output_shape, b.offsets, b.extents, attrs.dtype, seed_of(attrs),
            attrs.low.value_or(0.0), attrs.high.value_or(0.0)));
        break;
      case Kind::kNormal:
        out.copy_from(Tensor::random_normal_block(
            context.output_shape, b.offsets, b.extents, attrs.dtype, seed_of(attrs),
            attrs.mean.value_or(0.0), attrs.stddev.value_or(0.0)));
        break;
    }
  };
  registry.add(std::move(def));
}

// `attrs` (the op's own values) with what every creation op takes: the output's shape, layout
// and dtype, and the runtime whose devices hold it.
OpAttrs creation_attrs(const Shape& shape, const Layout& layout, DType dtype, Runtime* runtime,
                       OpAttrs attrs = {}) {
  attrs.shape = shape.dims();
  attrs.layout = layout;
  attrs.dtype = dtype;
  attrs.runtime = runtime;
  return attrs;
}

}  // namespace

void register_creation_ops(OpRegistry& registry) {
  add_creation(registry, "zeros", Kind::kZeros);
  add_creation(registry, "ones", Kind::kOnes);
  add_creation(registry, "fill", Kind::kFill);
  add_creation(registry, "random_uniform", Kind::kUniform);
  add_creation(registry, "random_normal", Kind::kNormal);
}

}  // namespace detail

DTensor zeros(const Shape& shape, const Layout& layout, DType dtype, Runtime* runtime) {
  return call_op("zeros", {}, detail::creation_attrs(shape, layout, dtype, runtime));
}

DTensor ones(const Shape& shape, const Layout& layout, DType dtype, Runtime* runtime) {
  return call_op("ones", {}, detail::creation_attrs(shape, layout, dtype, runtime));
}

DTensor fill(const Shape& shape, double value, const Layout& layout, DType dtype,
             Runtime* runtime) {
  return call_op("fill", {},
                 detail::creation_attrs(shape, layout, dtype, runtime, {.value = value}));
}

DTensor random_uniform(const Shape& shape, const Layout& layout, uint64_t seed, double low,
                       double high, DType dtype, Runtime* runtime) {
  return call_op("random_uniform", {},
                 detail::creation_attrs(shape, layout, dtype, runtime,
                                        {.low = low, .high = high, .seed = seed}));
}

DTensor random_normal(const Shape& shape, const Layout& layout, uint64_t seed, double mean,
                      double stddev, DType dtype, Runtime* runtime) {
  return call_op("random_normal", {},
                 detail::creation_attrs(shape, layout, dtype, runtime,
                                        {.mean = mean, .stddev = stddev, .seed = seed}));
}

namespace {

// Replicated on the default mesh; none: kInvalidArgument naming the op.
Layout on_default_mesh(std::string_view op, const Shape& shape) {
  return Layout::replicated(require_default_mesh(op), shape.rank());
}

}  // namespace

DTensor zeros(const Shape& shape, DType dtype, Runtime* runtime) {
  return zeros(shape, on_default_mesh("zeros", shape), dtype, runtime);
}

DTensor ones(const Shape& shape, DType dtype, Runtime* runtime) {
  return ones(shape, on_default_mesh("ones", shape), dtype, runtime);
}

DTensor fill(const Shape& shape, double value, DType dtype, Runtime* runtime) {
  return fill(shape, value, on_default_mesh("fill", shape), dtype, runtime);
}

DTensor random_uniform(const Shape& shape, uint64_t seed, double low, double high, DType dtype,
                       Runtime* runtime) {
  return random_uniform(shape, on_default_mesh("random_uniform", shape), seed, low, high, dtype,
                        runtime);
}

DTensor random_normal(const Shape& shape, uint64_t seed, double mean, double stddev, DType dtype,
                      Runtime* runtime) {
  return random_normal(shape, on_default_mesh("random_normal", shape), seed, mean, stddev, dtype,
                       runtime);
}

DTensor zeros_like(const DTensor& x) {
  if (!x.defined()) detail::throw_invalid("zeros_like", "the input is a null DTensor");
  return zeros(x.shape(), x.layout(), x.dtype(), &x.runtime());
}

DTensor ones_like(const DTensor& x) {
  if (!x.defined()) detail::throw_invalid("ones_like", "the input is a null DTensor");
  return ones(x.shape(), x.layout(), x.dtype(), &x.runtime());
}

}  // namespace tessel
