// The indexing op family (registered by register_indexing_ops): embedding_lookup and the
// internal "embedding_lookup_grad" (a scatter-add) that its VJP calls.
//
// Sharding rules (one line each):
//   embedding_lookup(table [V, D], ids [..]): the table keeps its layout (it is never gathered);
//     the ids keep their sharding except over mesh dims the table uses (sharded or Partial),
//     which they are demanded replicated over, and no Partial; the output [.., D] has the ids'
//     specs and the table's column spec. A table whose rows are sharded over mesh dims M does a
//     masked local lookup (ids outside the local rows give zeros) and the output is
//     Partial(sum) over M. A Partial table stays Partial (a lookup only selects rows) when its
//     reduce op is sum, or whatever its op when the rows are not sharded; otherwise it is
//     reduced first (one layout cannot mix reduce ops).
//   embedding_lookup_grad(ids, g) -> [V, D] (attrs.layout: the table's layout, attrs.vocab_size:
//     V): the output has the table's specs; each device adds only the rows it holds; it is
//     Partial(sum) over the ids' mesh dims (each device saw only its ids) and over g's pending
//     sums; ids are demanded replicated over the table's mesh dims, g in the ids' specs plus the
//     table's column spec; g's pending reductions over the table's mesh dims or with an op other
//     than sum are done first.
//
// Out-of-range ids (negative or >= V) throw kInvalidArgument from the kernel; the error surfaces
// at the next sync point naming the op (kernels run asynchronously).
#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "dtensor/ops/op_families.h"
#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kLookup = "embedding_lookup";
constexpr std::string_view kLookupGrad = "embedding_lookup_grad";

// The ids' specs without the mesh dims that `table` uses.
SpecList ids_specs(const Layout& ids, const Layout& table) {
  SpecList specs = spec_list(ids);
  for (auto& dims : specs) {
    dims.erase(std::remove_if(dims.begin(), dims.end(),
                              [&](const std::string& m) { return uses_mesh_dim(table, m); }),
               dims.end());
  }
  return specs;
}

void check_table(const TensorSpec& table, std::string_view op) {
  if (table.shape.rank() != 2) {
    throw_invalid(op, "the table must have rank 2 ([vocab, dim]), got shape {}",
                  table.shape.to_string());
  }
  require_float(table.dtype, op, "the table", NotFloat::kInvalid);
}

[[noreturn]] void bad_id(int64_t id, int64_t vocab, std::string_view op) {
  throw_invalid(op, "id {} is not in [0, {}) (the table's rows)", id, vocab);
}

// ---- embedding_lookup(table, ids) ---------------------------------------------------------

TensorSpec infer_lookup(const std::vector<TensorSpec>& in) {
  check_table(in[0], kLookup);
  require_index(in[1].dtype, kLookup, "ids");
  std::vector<int64_t> dims = in[1].shape.dims();
  dims.push_back(in[0].shape[1]);
  return {Shape(dims), in[0].dtype, {}};
}

ShardingDecision shard_lookup(const std::vector<TensorSpec>& in) {
  const Layout& given = in[0].layout;
  const Mesh& mesh = given.mesh();
  const SpecList table_specs = spec_list(given);
  const std::vector<std::string>& rows = table_specs[0];
  bool keep_partial = true;
  if (!rows.empty()) {
    for (const PartialDim& p : given.partial())
      keep_partial = keep_partial && p.op == ReduceOp::kSum;
  }
  const Layout table = keep_partial ? given : given.without_partial();
  SpecList out = ids_specs(in[1].layout, table);
  const Layout ids = make_layout(mesh, out);
  out.push_back(table_specs[1]);
  std::vector<PartialDim> partial = table.partial();
  for (const std::string& m : rows) partial.push_back({m, ReduceOp::kSum});
  return {{table, ids}, make_layout(mesh, out, std::move(partial))};
}

template <typename T, typename I>
void lookup_rows(const T* table, int64_t row_begin, int64_t rows, int64_t dim, const I* ids,
                 int64_t count, int64_t vocab, T* out) {
  for (int64_t k = 0; k < count; ++k) {
    const int64_t id = static_cast<int64_t>(ids[k]);
    if (id < 0 || id >= vocab) bad_id(id, vocab, kLookup);
    T* o = out + k * dim;
    const int64_t local = id - row_begin;
    if (local >= 0 && local < rows) {
      std::memcpy(o, table + local * dim, static_cast<size_t>(dim) * sizeof(T));
    } else {
      std::fill(o, o + dim, T(0));
    }
  }
}

void lookup_kernel(const std::vector<Tensor>& in, Tensor& out, const LocalContext& context) {
  const Tensor& table = in[0];
  const Tensor& ids = in[1];
  const int64_t row_begin = context.input_blocks[0].offsets[0];
  const int64_t vocab = context.input_shapes[0][0];
  const int64_t dim = table.shape()[1];
  dispatch_float(table.dtype(), kLookup, [&]<typename T>() {
    dispatch_index(ids.dtype(), kLookup, [&]<typename I>() {
      lookup_rows<T, I>(table.data<T>(), row_begin, table.shape()[0], dim, ids.data<I>(),
                        ids.num_elements(), vocab, out.data<T>());
    });
  });
}

// ---- embedding_lookup_grad(ids, g) --------------------------------------------------------

TensorSpec infer_lookup_grad(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  require_index(in[0].dtype, kLookupGrad, "ids");
  if (!attrs.vocab_size || *attrs.vocab_size < 0 || !attrs.layout || attrs.layout->rank() != 2) {
    throw_invalid(kLookupGrad,
                  "needs the vocabulary size in attrs.vocab_size and the table's layout");
  }
  const Shape& ids = in[0].shape;
  const Shape& g = in[1].shape;
  bool ok = g.rank() == ids.rank() + 1;
  for (int d = 0; ok && d < ids.rank(); ++d) ok = g[d] == ids[d];
  if (!ok) {
    throw_invalid(kLookupGrad, "gradient shape {} does not match ids shape {} plus [dim]",
                  g.to_string(), ids.to_string());
  }
  require_float(in[1].dtype, kLookupGrad, "the gradient", NotFloat::kInvalid);
  return {Shape({*attrs.vocab_size, g[g.rank() - 1]}), in[1].dtype, {}};
}

ShardingDecision shard_lookup_grad(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  const Mesh& mesh = in[0].layout.mesh();
  const SpecList table_specs = spec_list(*attrs.layout);
  const Layout table = make_layout(mesh, table_specs);
  SpecList ids_spec = ids_specs(in[0].layout, table);
  const Layout ids = make_layout(mesh, ids_spec);
  SpecList g_spec = ids_spec;
  g_spec.push_back(table_specs[1]);
  std::vector<PartialDim> pending;
  std::vector<PartialDim> out_partial;
  for (const auto& dims : ids_spec) {
    for (const std::string& m : dims) out_partial.push_back({m, ReduceOp::kSum});
  }
  for (const PartialDim& p : in[1].layout.partial()) {
    if (p.op == ReduceOp::kSum && !uses_mesh_dim(table, p.mesh_dim) &&
        !uses_mesh_dim(ids, p.mesh_dim)) {
      pending.push_back(p);
      out_partial.push_back(p);
    }
  }
  return {{ids, make_layout(mesh, g_spec, std::move(pending))},
          make_layout(mesh, table_specs, std::move(out_partial))};
}

template <typename T, typename I>
void scatter_add_rows(const I* ids, int64_t count, const T* g, int64_t dim, int64_t row_begin,
                      int64_t rows, int64_t vocab, T* out) {
  std::fill(out, out + rows * dim, T(0));
  for (int64_t k = 0; k < count; ++k) {
    const int64_t id = static_cast<int64_t>(ids[k]);
    if (id < 0 || id >= vocab) bad_id(id, vocab, kLookupGrad);
    const int64_t local = id - row_begin;
    if (local < 0 || local >= rows) continue;
    T* o = out + local * dim;
    const T* gk = g + k * dim;
    for (int64_t c = 0; c < dim; ++c) o[c] += gk[c];
  }
}

void lookup_grad_kernel(const std::vector<Tensor>& in, Tensor& out, const LocalContext& context) {
  const Tensor& ids = in[0];
  const Tensor& g = in[1];
  dispatch_float(out.dtype(), kLookupGrad, [&]<typename T>() {
    dispatch_index(ids.dtype(), kLookupGrad, [&]<typename I>() {
      scatter_add_rows<T, I>(ids.data<I>(), ids.num_elements(), g.data<T>(), out.shape()[1],
                             context.output_block.offsets[0], out.shape()[0],
                             context.output_shape[0], out.data<T>());
    });
  });
}

}  // namespace

void register_indexing_ops(OpRegistry& registry) {
  {
    OpDef def;
    def.name = std::string(kLookup);
    def.num_inputs = 2;
    def.infer = [](const std::vector<TensorSpec>& in, const OpAttrs&) { return infer_lookup(in); };
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
      return shard_lookup(in);
    };
    def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                    const LocalContext& context) { lookup_kernel(in, out, context); };
    // table: scatter-add of g into zeros of the table's layout; ids: not differentiable.
    def.vjp = [](const VjpArgs& a) {
      OpAttrs attrs;
      attrs.vocab_size = a.inputs[0].shape()[0];
      attrs.layout = a.inputs[0].layout().without_partial();
      return std::vector<DTensor>{call_op(kLookupGrad, {a.inputs[1], a.grad}, attrs), DTensor()};
    };
    def.saves = VjpSaves::of_inputs({1});  // the ids; of the table its shape and layout only
    registry.add(std::move(def));
  }
  {
    OpDef def;
    def.name = std::string(kLookupGrad);
    def.num_inputs = 2;
    def.infer = infer_lookup_grad;
    def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs& attrs) {
      return shard_lookup_grad(in, attrs);
    };
    def.kernel = [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                    const LocalContext& context) { lookup_grad_kernel(in, out, context); };
    // Linear in g: its gradient is the lookup of gg's rows.
    def.vjp = [](const VjpArgs& a) {
      return std::vector<DTensor>{DTensor(), embedding_lookup(a.grad, a.inputs[0])};
    };
    def.saves = VjpSaves::of_inputs({0});
    registry.add(std::move(def));
  }
}

}  // namespace detail

DTensor embedding_lookup(const DTensor& table, const DTensor& ids) {
  return call_op(detail::kLookup, {table, ids});
}

}  // namespace tessel
