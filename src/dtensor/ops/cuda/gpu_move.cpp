// The GPU kernels of the ops that move elements (gpu_move.cu), for contiguous blocks:
//   reshape and stop_gradient: a device-to-device copy, any dtype;
//   transpose: a strided copy, any dtype of 1, 2, 4 or 8 bytes, when the permuted block has at
//     most StridedIndex::kMaxDims dimensions left after merging (else host-staged);
//   zeros, ones, fill: a memset (zeros, and the devices past the first of a Partial(sum) group)
//     or a fill with the value's bit pattern in the dtype, any dtype of those widths;
//   reduce_sum_grad: the gradient broadcast back times the scale, f32 / f64, at most kMaxDims
//     merged dimensions;
//   embedding_lookup and embedding_lookup_grad: f32 / f64 tables with i32 / i64 ids. An id
//     outside the vocabulary is found on the device; the block then waits for its stream to
//     read that report back and throws kInvalidArgument as the CPU kernel does;
//   dropout: f32 / f64, the mask from the CPU's counter hash at each element's global index
//     (bit-equal), at most kMaxDims merged dimensions of the block within the global shape.
//   slice, slice_grad, concat2 .. concat8: box copies between blocks (a strided read of the
//     slice's box; slice_grad's zeros, then a strided write of the gradient into its box;
//     concat's strided write of each input into its box), any dtype of 1, 2, 4 or 8 bytes, when
//     a box has at most kMaxDims dimensions after merging (else host-staged).
#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "dtensor/ops/cuda/gpu_kernels.h"
#include "dtensor/ops/cuda/gpu_launch.h"
#include "dtensor/ops/op_families.h"
#include "dtensor/framework/op_util.h"

namespace tessel::detail {
namespace {

using gpu::StridedIndex;

// Calls f.template operator()<E>() with E the unsigned integer of `dtype`'s width; nullopt (run
// host-staged) for any other width.
template <typename F>
GpuLaunch by_width(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    case 8:
      return f.template operator()<uint64_t>();
    default:
      return std::nullopt;
  }
}

// The strided read of `extent` (outermost first) at element strides `stride`: size-1 dims
// dropped and dim d merged into d + 1 where stride[d] == stride[d + 1] * extent[d + 1]; nullopt
// when more than kMaxDims dims are left.
std::optional<StridedIndex> strided_index(const std::vector<int64_t>& extent,
                                          const std::vector<int64_t>& stride) {
  std::vector<int64_t> e, s;  // kept dims, outermost first
  for (size_t d = 0; d < extent.size(); ++d) {
    if (extent[d] == 1) continue;
    if (!e.empty() && s.back() == stride[d] * extent[d]) {
      e.back() *= extent[d];
      s.back() = stride[d];
      continue;
    }
    e.push_back(extent[d]);
    s.push_back(stride[d]);
  }
  if (e.size() > static_cast<size_t>(StridedIndex::kMaxDims)) return std::nullopt;
  StridedIndex index;
  index.dims = static_cast<int>(e.size());
  for (size_t d = 0; d < e.size(); ++d) {
    index.extent[d] = e[d];
    index.stride[d] = s[d];
  }
  return index;
}

std::vector<int64_t> row_major_strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

GpuLaunch copy_block(const Tensor& in, Tensor& out, cudaStream_t stream) {
  return cudaMemcpyAsync(out.data_ptr(), in.data_ptr(), out.nbytes(), cudaMemcpyDeviceToDevice,
                         stream);
}

// reshape and stop_gradient: the block's bytes unchanged (reshape's blocks hold the same
// elements in the same order; ops_shape.cpp's reshape_kernel checks the counts).
OpDef::Kernel copy_kernel(const char* name) {
  return [name](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                const LocalContext& context) {
    const bool covered = contiguous_blocks(in, out) && in[0].nbytes() == out.nbytes() &&
                         in[0].dtype() == out.dtype();
    run_gpu_kernel(name, covered, in, out, attrs, context,
                   [&](cudaStream_t stream) { return copy_block(in[0], out, stream); });
  };
}

OpDef::Kernel transpose_kernel() {
  return [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
            const LocalContext& context) {
    run_gpu_kernel("transpose", contiguous_blocks(in, out), in, out, attrs, context,
                   [&](cudaStream_t stream) -> GpuLaunch {
                     const std::vector<int64_t>& shape = in[0].shape().dims();
                     const std::vector<int64_t> strides = row_major_strides_of(shape);
                     // The CPU kernel's resolve_perm: empty perm reverses the axes.
                     std::vector<int64_t> perm = attrs.perm;
                     if (perm.empty()) {
                       for (size_t d = shape.size(); d-- > 0;)
                         perm.push_back(static_cast<int64_t>(d));
                     }
                     std::vector<int64_t> extent, stride;
                     for (int64_t p : perm) {
                       const size_t q = static_cast<size_t>(p < 0 ? p + in[0].rank() : p);
                       extent.push_back(shape[q]);
                       stride.push_back(strides[q]);
                     }
                     const std::optional<StridedIndex> index = strided_index(extent, stride);
                     if (!index) return std::nullopt;
                     return by_width(out.dtype(), [&]<typename E>() {
                       return gpu::launch_strided_copy<E>(static_cast<const E*>(in[0].data_ptr()),
                                                          static_cast<E*>(out.data_ptr()),
                                                          out.num_elements(), *index, stream);
                     });
                   });
  };
}

// A box of `extent` at `origin` inside a contiguous block of `shape`: the offset of its first
// element and the strided index of its elements (nullopt: more than kMaxDims dims after merging).
struct BoxInBlock {
  int64_t first;
  StridedIndex index;
};
std::optional<BoxInBlock> box_in_block(const std::vector<int64_t>& shape,
                                       const std::vector<int64_t>& origin,
                                       const std::vector<int64_t>& extent) {
  const std::vector<int64_t> strides = row_major_strides_of(shape);
  const std::optional<StridedIndex> index = strided_index(extent, strides);
  if (!index) return std::nullopt;
  int64_t first = 0;
  for (size_t d = 0; d < strides.size(); ++d) first += origin[d] * strides[d];
  return BoxInBlock{first, *index};
}

// Where the slice's box lies in the block of the larger (`full`) tensor, as ops_shape.cpp's
// slice_kernel and slice_grad_kernel place it: attrs.begin along the dims the slice shortens
// (whole in the block there), 0 along the others (where both blocks are the same box).
std::vector<int64_t> slice_origin(const Shape& full, const Shape& part,
                                  const std::vector<int64_t>& begin) {
  std::vector<int64_t> origin(static_cast<size_t>(full.rank()), 0);
  for (int d = 0; d < full.rank(); ++d) {
    if (full[d] != part[d]) origin[static_cast<size_t>(d)] = begin[static_cast<size_t>(d)];
  }
  return origin;
}

// True when the blocks are contiguous and all of the output's dtype.
bool contiguous_same_dtype(const std::vector<Tensor>& in, const Tensor& out) {
  for (const Tensor& t : in) {
    if (t.dtype() != out.dtype()) return false;
  }
  return contiguous_blocks(in, out);
}

// slice(x): the output block read from x's block at the slice's origin (strided copy).
void slice_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                  const LocalContext& context) {
  run_gpu_kernel("slice", contiguous_same_dtype(in, out), in, out, attrs, context,
                 [&](cudaStream_t stream) -> GpuLaunch {
                   if (out.num_elements() == 0) return cudaSuccess;
                   const std::optional<BoxInBlock> box = box_in_block(
                       in[0].shape().dims(),
                       slice_origin(context.input_shapes[0], context.output_shape, attrs.begin),
                       out.shape().dims());
                   if (!box) return std::nullopt;
                   return by_width(out.dtype(), [&]<typename E>() {
                     return gpu::launch_strided_copy<E>(
                         static_cast<const E*>(in[0].data_ptr()) + box->first,
                         static_cast<E*>(out.data_ptr()), out.num_elements(), box->index, stream);
                   });
                 });
}

// slice_grad(g): the output block zeroed, then g's block written at the slice's origin.
void slice_grad_kernel(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                       const LocalContext& context) {
  const Tensor& g = in[0];
  run_gpu_kernel(
      "slice_grad", contiguous_same_dtype(in, out), in, out, attrs, context,
      [&](cudaStream_t stream) -> GpuLaunch {
        if (out.num_elements() == 0) return cudaSuccess;
        const std::optional<BoxInBlock> box =
            box_in_block(out.shape().dims(),
                         slice_origin(context.output_shape, context.input_shapes[0], attrs.begin),
                         g.shape().dims());
        if (!box) return std::nullopt;
        return by_width(out.dtype(), [&]<typename E>() -> GpuLaunch {
          const cudaError_t zeroed = cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream);
          // An empty gradient's box may start past the block.
          if (zeroed != cudaSuccess || g.num_elements() == 0) return zeroed;
          return gpu::launch_strided_write<E>(static_cast<const E*>(g.data_ptr()),
                                              static_cast<E*>(out.data_ptr()) + box->first,
                                              g.num_elements(), box->index, stream);
        });
      });
}

// concatN(x0, ..): each input's block written into the output block after the previous ones
// along the axis (whole in the blocks), one strided write per input, as ops_shape.cpp's
// concat_kernel copies them.
OpDef::Kernel concat_kernel(std::string name) {
  return [name = std::move(name)](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                                  const LocalContext& context) {
    run_gpu_kernel(name, contiguous_same_dtype(in, out), in, out, attrs, context,
                   [&](cudaStream_t stream) -> GpuLaunch {
                     const size_t axis = static_cast<size_t>(
                         normalize_axis(attrs.axis.value_or(0), out.rank(), name));
                     std::vector<int64_t> origin(static_cast<size_t>(out.rank()), 0);
                     std::vector<BoxInBlock> boxes;
                     for (const Tensor& t : in) {
                       const std::optional<BoxInBlock> box =
                           box_in_block(out.shape().dims(), origin, t.shape().dims());
                       if (!box) return std::nullopt;
                       boxes.push_back(*box);
                       origin[axis] += t.shape().dims()[axis];
                     }
                     return by_width(out.dtype(), [&]<typename E>() -> GpuLaunch {
                       for (size_t k = 0; k < in.size(); ++k) {
                         if (in[k].num_elements() == 0)
                           continue;  // its box may start past the block
                         const cudaError_t status = gpu::launch_strided_write<E>(
                             static_cast<const E*>(in[k].data_ptr()),
                             static_cast<E*>(out.data_ptr()) + boxes[k].first, in[k].num_elements(),
                             boxes[k].index, stream);
                         if (status != cudaSuccess) return status;
                       }
                       return cudaSuccess;
                     });
                   });
  };
}

// zeros / ones / fill (ops_creation.cpp): 0 past the first device of a Partial(sum) group.
OpDef::Kernel creation_kernel(const char* name, std::optional<double> fixed_value) {
  return [name, fixed_value](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                             const LocalContext& context) {
    run_gpu_kernel(name, contiguous_blocks(in, out), in, out, attrs, context,
                   [&](cudaStream_t stream) -> GpuLaunch {
                     const double value =
                         first_in_sum_groups(*context.output_layout, context.mesh_offset)
                             ? fixed_value.value_or(attrs.value.value_or(0.0))
                             : 0.0;
                     if (value == 0.0 && !std::signbit(value))
                       return cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream);
                     // The value in the dtype as Tensor::fill writes it, then its bits.
                     Tensor one = Tensor::empty(Shape(), out.dtype(), nullptr, /*zero_fill=*/false);
                     one.fill(value);
                     return by_width(out.dtype(), [&]<typename E>() {
                       E bits;
                       std::memcpy(&bits, one.data(), sizeof(E));
                       return gpu::launch_fill<E>(static_cast<E*>(out.data_ptr()),
                                                  out.num_elements(), bits, stream);
                     });
                   });
  };
}

// ops_reduction.cpp's sum_grad_kernel: the output block read from g at stride 0 along the
// reduced axes and g's row-major strides along the others.
OpDef::Kernel reduce_sum_grad_kernel() {
  return float_gpu_kernel(
      "reduce_sum_grad",
      []<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext& context, cudaStream_t stream) -> GpuLaunch {
        const std::vector<bool> mask =
            reduced_mask(attrs.axes, context.output_shape, "reduce_sum_grad");
        const std::vector<int64_t>& shape = out.shape().dims();
        std::vector<int64_t> stride(shape.size(), 0);
        int64_t g_stride = 1;
        for (size_t d = shape.size(); d-- > 0;) {
          if (mask[d]) continue;
          stride[d] = g_stride;
          g_stride *= shape[d];
        }
        const std::optional<StridedIndex> index = strided_index(shape, stride);
        if (!index) return std::nullopt;
        return gpu::launch_strided_scale<T>(device_data<T>(in[0]), device_data<T>(out),
                                            out.num_elements(), *index,
                                            static_cast<T>(attrs.scale.value_or(0.0)), stream);
      });
}

// Runs an embedding kernel `launch(BadId*)` with a zeroed report, waits for the stream, and
// throws the CPU kernel's kInvalidArgument when an id was out of range.
GpuLaunch with_id_check(std::string_view op, int64_t vocab, cudaStream_t stream,
                        const std::function<cudaError_t(gpu::BadId*)>& launch) {
  gpu::BadId report{};
  const cudaError_t status = launch_with_report(&report, sizeof(report), 0, stream, [&](void* bad) {
    return launch(static_cast<gpu::BadId*>(bad));
  });
  if (status == cudaSuccess && report.found != 0) {
    throw_invalid(op, "id {} is not in [0, {}) (the table's rows)", report.id, vocab);
  }
  return status;
}

// embedding_lookup(table, ids); a width-0 table runs host-staged (the CPU kernel still checks
// the ids).
OpDef::Kernel embedding_lookup_kernel() {
  return [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
            const LocalContext& context) {
    const Tensor& table = in[0];
    const Tensor& ids = in[1];
    const bool covered =
        contiguous_blocks(in, out) && table.dtype() == out.dtype() && table.shape()[1] > 0;
    run_gpu_kernel(
        "embedding_lookup", covered, in, out, attrs, context,
        [&](cudaStream_t stream) -> GpuLaunch {
          const int64_t vocab = context.input_shapes[0][0];
          return by_value_and_index(out.dtype(), ids.dtype(), [&]<typename T, typename I>() {
            return with_id_check("embedding_lookup", vocab, stream, [&](gpu::BadId* bad) {
              return gpu::launch_embedding_lookup<T, I>(
                  device_data<T>(table), context.input_blocks[0].offsets[0], table.shape()[0],
                  table.shape()[1], static_cast<const I*>(ids.data_ptr()), ids.num_elements(),
                  vocab, device_data<T>(out), bad, stream);
            });
          });
        });
  };
}

// embedding_lookup_grad(ids, g) -> [V, D]; width 0 runs host-staged, as for the lookup.
OpDef::Kernel embedding_lookup_grad_kernel() {
  return [](const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
            const LocalContext& context) {
    const Tensor& ids = in[0];
    const Tensor& g = in[1];
    const bool covered =
        contiguous_blocks(in, out) && g.dtype() == out.dtype() && out.shape()[1] > 0;
    run_gpu_kernel(
        "embedding_lookup_grad", covered, in, out, attrs, context,
        [&](cudaStream_t stream) -> GpuLaunch {
          const int64_t vocab = context.output_shape[0];
          return by_value_and_index(out.dtype(), ids.dtype(), [&]<typename T, typename I>() {
            return with_id_check("embedding_lookup_grad", vocab, stream, [&](gpu::BadId* bad) {
              return gpu::launch_embedding_scatter_add<T, I>(
                  static_cast<const I*>(ids.data_ptr()), ids.num_elements(), device_data<T>(g),
                  out.shape()[1], context.output_block.offsets[0], out.shape()[0], vocab,
                  device_data<T>(out), bad, stream);
            });
          });
        });
  };
}

// ops_dropout.cpp's dropout_kernel: the block's elements read their global flat index at the
// global shape's row-major strides from the block's first element.
OpDef::Kernel dropout_kernel() {
  return float_gpu_kernel(
      "dropout",
      []<typename T>(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs,
                     const LocalContext& context, cudaStream_t stream) -> GpuLaunch {
        const Box& block = context.output_block;
        const std::vector<int64_t> global_strides = context.output_shape.strides();
        int64_t first = 0;
        for (size_t d = 0; d < global_strides.size(); ++d)
          first += block.offsets[d] * global_strides[d];
        const std::optional<StridedIndex> index = strided_index(block.extents, global_strides);
        if (!index) return std::nullopt;
        const double rate = attrs.rate.value_or(0.0);
        return gpu::launch_dropout<T>(device_data<T>(in[0]), device_data<T>(out),
                                      out.num_elements(), *index, first, attrs.seed.value_or(0),
                                      rate, static_cast<T>(1.0 / (1.0 - rate)), stream);
      });
}

}  // namespace

void register_gpu_move_kernels(OpRegistry& registry) {
  registry.set_gpu_kernel("reshape", copy_kernel("reshape"));
  registry.set_gpu_kernel("stop_gradient", copy_kernel("stop_gradient"));
  registry.set_gpu_kernel("transpose", transpose_kernel());
  registry.set_gpu_kernel("zeros", creation_kernel("zeros", 0.0));
  registry.set_gpu_kernel("ones", creation_kernel("ones", 1.0));
  registry.set_gpu_kernel("fill", creation_kernel("fill", std::nullopt));
  registry.set_gpu_kernel("reduce_sum_grad", reduce_sum_grad_kernel());
  registry.set_gpu_kernel("embedding_lookup", embedding_lookup_kernel());
  registry.set_gpu_kernel("embedding_lookup_grad", embedding_lookup_grad_kernel());
  registry.set_gpu_kernel("dropout", dropout_kernel());
  registry.set_gpu_kernel("slice", slice_kernel);
  registry.set_gpu_kernel("slice_grad", slice_grad_kernel);
  for (int arity = 2; arity <= kMaxConcatArity; ++arity) {
    const std::string name = concat_name(static_cast<size_t>(arity));
    registry.set_gpu_kernel(name, concat_kernel(name));
  }
}

}  // namespace tessel::detail
