// plan_relayout: TF's split / all-to-all / gather lowering (reference §5.1), extended to Partial
// layouts, several mesh dimensions per tensor dimension, uneven shards and other meshes. Every
// collective step is checked against the exact blocks (ShardMap) before it is used; when the
// collective steps cannot do a move, or would send more than moving the blocks directly, one
// send_recv step moves exactly the blocks whose holder changes.
#include <algorithm>
#include <map>
#include <set>

#include "core/errors.h"
#include "dtensor/relayout/block_transfers.h"
#include "dtensor/framework/op_util.h"
#include "tessel/comm/mesh_groups.h"
#include "tessel/dtensor/relayout_plan.h"

namespace tessel {
namespace {

constexpr std::string_view kComponent = "relayout";

using Specs = detail::SpecList;  // per tensor dim: mesh dims, major first

Specs specs_of(const Layout& layout) { return detail::spec_list(layout); }
using detail::make_layout;

bool is_prefix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

bool uses(const Specs& specs, const std::string& dim) {
  for (const auto& s : specs) {
    if (std::find(s.begin(), s.end(), dim) != s.end()) return true;
  }
  return false;
}

std::vector<detail::MaybeBox> maybe(const std::vector<Box>& boxes) {
  return {boxes.begin(), boxes.end()};
}

// Group index per mesh offset for collectives over `dims` (empty: one group, the whole mesh).
std::vector<int> groups_over(const Mesh& mesh, const std::vector<std::string>& dims) {
  std::vector<int> group(static_cast<size_t>(mesh.size()), 0);
  if (dims.empty()) return group;
  const auto groups = collective_groups(mesh, dims);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int64_t offset : groups[g]) group[static_cast<size_t>(offset)] = static_cast<int>(g);
  }
  return group;
}

int64_t group_size(const Mesh& mesh, const std::vector<std::string>& dims) {
  int64_t n = 1;
  for (const std::string& d : dims) n *= mesh.dim_size(d);
  return n;
}

class Planner {
 public:
  Planner(const Shape& shape, DType dtype) : shape_(shape), dtype_(dtype) {}

  // A block-moving step from `from` to `to` inside the groups over `group_dims`; false when
  // some device's new block is not inside its group's old blocks.
  bool add_moving(RelayoutStepKind kind, std::vector<std::string> mesh_dims,
                  std::vector<int> tensor_dims, const Layout& from, const Layout& to,
                  const std::vector<std::string>& group_dims, std::vector<RelayoutStep>& out) {
    const std::vector<detail::MaybeBox> before = maybe(detail::blocks_of(from, shape_));
    const std::vector<detail::MaybeBox> after = maybe(detail::blocks_of(to, shape_));
    auto transfers = detail::block_transfers(before, after, groups_over(from.mesh(), group_dims));
    if (!transfers) return false;
    RelayoutStep step = base(kind, std::move(mesh_dims), std::move(tensor_dims), from, to);
    step.participants = detail::mesh_device_names(from.mesh());
    step.bytes_per_device =
        detail::max_bytes_sent(*transfers, static_cast<int>(before.size()), dtype_);
    step.bytes_total = detail::total_bytes_sent(*transfers, dtype_);
    step.peak_bytes = detail::max_block_bytes(after, dtype_);
    step.transfers = std::move(*transfers);
    out.push_back(std::move(step));
    return true;
  }

  // A local slice: every device's new block lies inside its old one.
  bool add_slice(std::vector<std::string> mesh_dims, std::vector<int> tensor_dims,
                 const Layout& from, const Layout& to, std::vector<RelayoutStep>& out) {
    const std::vector<Box> before = detail::blocks_of(from, shape_);
    const std::vector<Box> after = detail::blocks_of(to, shape_);
    for (size_t k = 0; k < before.size(); ++k) {
      if (!before[k].contains(after[k])) return false;
    }
    RelayoutStep step =
        base(RelayoutStepKind::kLocalSlice, std::move(mesh_dims), std::move(tensor_dims), from, to);
    step.peak_bytes = detail::max_block_bytes(maybe(after), dtype_);
    out.push_back(std::move(step));
    return true;
  }

  // A step that keeps every block (reductions, local_partial); `sent_factor` scales the block
  // bytes into bytes sent per device.
  void add_in_place(RelayoutStepKind kind, std::vector<std::string> mesh_dims, const Layout& from,
                    const Layout& to, double sent_factor, std::vector<RelayoutStep>& out) {
    RelayoutStep step = base(kind, std::move(mesh_dims), {}, from, to);
    const int64_t block = detail::max_block_bytes(maybe(detail::blocks_of(from, shape_)), dtype_);
    step.bytes_per_device = static_cast<int64_t>(static_cast<double>(block) * sent_factor);
    step.bytes_total = step.bytes_per_device * from.mesh().size();
    step.peak_bytes = detail::max_block_bytes(maybe(detail::blocks_of(to, shape_)), dtype_);
    out.push_back(std::move(step));
  }

  // reduce_scatter of the partial dim m onto tensor dim i: every device keeps its new block
  // (inside its old one), reduced over its group.
  bool add_reduce_scatter(const std::string& m, int i, const Layout& from, const Layout& to,
                          std::vector<RelayoutStep>& out) {
    const std::vector<Box> before = detail::blocks_of(from, shape_);
    const std::vector<Box> after = detail::blocks_of(to, shape_);
    int64_t most_sent = 0;
    int64_t total_sent = 0;
    for (size_t k = 0; k < before.size(); ++k) {
      if (!before[k].contains(after[k])) return false;
      const int64_t sent = before[k].num_elements() - after[k].num_elements();
      most_sent = std::max(most_sent, sent);
      total_sent += sent;
    }
    const auto esize = static_cast<int64_t>(dtype_size(dtype_));
    RelayoutStep step = base(RelayoutStepKind::kReduceScatter, {m}, {i}, from, to);
    step.bytes_per_device = most_sent * esize;
    step.bytes_total = total_sent * esize;
    step.peak_bytes = detail::max_block_bytes(maybe(after), dtype_);
    out.push_back(std::move(step));
    return true;
  }

  // One send_recv from `from` to `to` (the same mesh or another one).
  RelayoutStep send_recv(const Layout& from, const Layout& to) {
    std::vector<std::string> names = detail::mesh_device_names(from.mesh());
    const std::vector<Box> src = detail::blocks_of(from, shape_);
    std::vector<detail::MaybeBox> before(src.begin(), src.end());
    std::vector<detail::MaybeBox> after(names.size());
    const std::vector<Box> dst = detail::blocks_of(to, shape_);
    const std::vector<std::string> to_names = detail::mesh_device_names(to.mesh());
    for (size_t k = 0; k < to_names.size(); ++k) {
      auto it = std::find(names.begin(), names.end(), to_names[k]);
      if (it == names.end()) {
        names.push_back(to_names[k]);
        before.emplace_back();
        after.emplace_back(dst[k]);
      } else {
        after[static_cast<size_t>(it - names.begin())] = dst[k];
      }
    }
    auto transfers =
        detail::block_transfers(before, after, std::vector<int>(names.size(), 0));
    if (!transfers) {  // cannot happen: the source blocks tile the tensor
      detail::throw_error(ErrorCode::kInternal, kComponent, "the blocks of {} do not cover {}",
                          from.to_string(), shape_.to_string());
    }
    RelayoutStep step = base(RelayoutStepKind::kSendRecv, {}, {}, from, to);
    step.bytes_per_device =
        detail::max_bytes_sent(*transfers, static_cast<int>(names.size()), dtype_);
    step.bytes_total = detail::total_bytes_sent(*transfers, dtype_);
    step.peak_bytes = detail::max_block_bytes(after, dtype_);
    step.participants = std::move(names);
    step.transfers = std::move(*transfers);
    return step;
  }

  // Sharding moves on one mesh from `from` to `target_specs` (partial dims unchanged): slices,
  // all-to-alls and gathers while they apply; empty when they cannot finish the move.
  std::optional<std::vector<RelayoutStep>> collective_moves(const Layout& from,
                                                            const Specs& target) {
    std::vector<RelayoutStep> steps;
    Specs cur = specs_of(from);
    Layout layout = from;
    const Mesh& mesh = from.mesh();
    while (cur != target) {
      // Local slices: extend every dimension whose spec is a prefix of its target by the next
      // mesh dimension, while that dimension is free.
      Specs next = cur;
      std::vector<std::string> added;
      std::vector<int> dims;
      for (size_t i = 0; i < next.size(); ++i) {
        while (is_prefix(next[i], target[i]) && next[i].size() < target[i].size() &&
               !uses(next, target[i][next[i].size()])) {
          added.push_back(target[i][next[i].size()]);
          next[i].push_back(added.back());
          if (dims.empty() || dims.back() != static_cast<int>(i)) dims.push_back(static_cast<int>(i));
        }
      }
      if (next != cur) {
        const Layout to = make_layout(mesh, next, from.partial());
        if (add_slice(added, dims, layout, to, steps)) {
          cur = next;
          layout = to;
          continue;
        }
      }
      // All-to-all: the minor mesh dim m of a dimension that must lose it is the next one a
      // dimension j needs.
      bool moved = false;
      for (size_t i = 0; i < cur.size() && !moved; ++i) {
        if (cur[i].empty() || is_prefix(cur[i], target[i])) continue;
        const std::string m = cur[i].back();
        for (size_t j = 0; j < cur.size() && !moved; ++j) {
          if (j == i || !is_prefix(cur[j], target[j]) || cur[j].size() >= target[j].size() ||
              target[j][cur[j].size()] != m) {
            continue;
          }
          Specs step_specs = cur;
          step_specs[i].pop_back();
          step_specs[j].push_back(m);
          const Layout to = make_layout(mesh, step_specs, from.partial());
          if (add_moving(RelayoutStepKind::kAllToAll, {m},
                         {static_cast<int>(i), static_cast<int>(j)}, layout, to, {m}, steps)) {
            cur = step_specs;
            layout = to;
            moved = true;
          }
        }
      }
      if (moved) continue;
      // All-gather, one step for every dimension at once: drop the mesh dims of each dimension
      // past its common prefix with the target.
      Specs gathered_specs = cur;
      std::vector<std::string> gathered;
      std::vector<int> gathered_dims;
      for (size_t i = 0; i < cur.size(); ++i) {
        if (is_prefix(cur[i], target[i])) continue;
        size_t keep = 0;
        while (keep < cur[i].size() && keep < target[i].size() && cur[i][keep] == target[i][keep]) {
          ++keep;
        }
        gathered.insert(gathered.end(), cur[i].begin() + static_cast<long>(keep), cur[i].end());
        gathered_dims.push_back(static_cast<int>(i));
        gathered_specs[i].resize(keep);
      }
      if (!gathered.empty()) {
        const Layout to = make_layout(mesh, gathered_specs, from.partial());
        if (add_moving(RelayoutStepKind::kAllGather, gathered, gathered_dims, layout, to, gathered,
                       steps)) {
          cur = gathered_specs;
          layout = to;
          moved = true;
        }
      }
      if (!moved) return std::nullopt;
    }
    return steps;
  }

 private:
  RelayoutStep base(RelayoutStepKind kind, std::vector<std::string> mesh_dims,
                    std::vector<int> tensor_dims, const Layout& from, const Layout& to) const {
    RelayoutStep step;
    step.kind = kind;
    step.mesh_dims = std::move(mesh_dims);
    step.tensor_dims = std::move(tensor_dims);
    step.from = from;
    step.to = to;
    return step;
  }

  Shape shape_;
  DType dtype_;
};

void check_plannable(const Layout& layout, const Shape& shape, const char* which) {
  if (layout.is_empty()) detail::throw_invalid(kComponent, "the {} layout is empty", which);
  for (const ShardingSpec& s : layout.sharding_specs()) {
    if (s.is_any() || (s.is_match() && std::string_view(which) == "source")) {
      detail::throw_invalid(kComponent, "the {} layout {} has a '{}' spec", which,
                            layout.to_string(), s.to_string());
    }
  }
  if (!layout.is_single_device() && layout.rank() != shape.rank()) {
    detail::throw_invalid(kComponent,
                          "Attempted to relayout to a different global shape: the {} layout {} "
                          "has rank {}, the tensor {} has rank {}",
                          which, layout.to_string(), layout.rank(), shape.to_string(),
                          shape.rank());
  }
  std::set<ReduceOp> ops;
  for (const PartialDim& p : layout.partial()) ops.insert(p.op);
  if (ops.size() > 1) {
    detail::throw_error(ErrorCode::kUnimplemented, kComponent,
                        "the {} layout {} mixes reduce ops over its partial dimensions", which,
                        layout.to_string());
  }
}

const PartialDim* find_partial(const Layout& layout, const std::string& dim) {
  for (const PartialDim& p : layout.partial()) {
    if (p.mesh_dim == dim) return &p;
  }
  return nullptr;
}

// Pending reductions of `cur` that `target` does not keep: reduce_scatter onto a tensor dim
// that needs the mesh dim next, else one all_reduce over the rest. Returns the new layout.
Layout reduce_partials(Planner& planner, const Layout& start, const Layout& target,
                       std::vector<RelayoutStep>& steps) {
  Layout cur = start;
  const Specs want = specs_of(target);
  std::vector<std::string> to_reduce;
  for (const PartialDim& p : start.partial()) {
    if (const PartialDim* q = find_partial(target, p.mesh_dim)) {
      if (q->op != p.op) {
        detail::throw_invalid(kComponent, "cannot turn a pending {} over {} into a pending {}",
                              reduce_op_name(p.op), p.mesh_dim, reduce_op_name(q->op));
      }
      continue;
    }
    to_reduce.push_back(p.mesh_dim);
  }
  std::vector<std::string> rest;
  for (const std::string& m : to_reduce) {
    Specs specs = specs_of(cur);
    bool scattered = false;
    for (size_t i = 0; i < specs.size() && !scattered; ++i) {
      if (!is_prefix(specs[i], want[i]) || specs[i].size() >= want[i].size() ||
          want[i][specs[i].size()] != m) {
        continue;
      }
      specs[i].push_back(m);
      std::vector<PartialDim> partial;
      for (const PartialDim& p : cur.partial()) {
        if (p.mesh_dim != m) partial.push_back(p);
      }
      const Layout next = make_layout(cur.mesh(), specs, partial);
      if (planner.add_reduce_scatter(m, static_cast<int>(i), cur, next, steps)) {
        cur = next;
        scattered = true;
      }
    }
    if (!scattered) rest.push_back(m);
  }
  if (!rest.empty()) {
    std::vector<PartialDim> partial;
    for (const PartialDim& p : cur.partial()) {
      if (std::find(rest.begin(), rest.end(), p.mesh_dim) == rest.end()) partial.push_back(p);
    }
    const Layout next = make_layout(cur.mesh(), specs_of(cur), partial);
    const double g = static_cast<double>(group_size(cur.mesh(), rest));
    planner.add_in_place(RelayoutStepKind::kAllReduce, rest, cur, next, 2.0 * (g - 1.0) / g, steps);
    cur = next;
  }
  return cur;
}

// Target partial dims the tensor is not yet partial over: local_partial (the tensor is
// replicated along them by now).
void add_partials(Planner& planner, const Layout& cur, const Layout& target,
                  std::vector<RelayoutStep>& steps) {
  std::vector<std::string> added;
  for (const PartialDim& q : target.partial()) {
    if (!find_partial(cur, q.mesh_dim)) added.push_back(q.mesh_dim);
  }
  if (!added.empty()) {
    planner.add_in_place(RelayoutStepKind::kLocalPartial, added, cur, target, 0.0, steps);
  }
}

// A step after the first also holds its input (the previous step's output) until it ends:
// its peak is the most any device holds of input and output together.
void count_held_inputs(RelayoutPlan& plan) {
  const int64_t esize = static_cast<int64_t>(dtype_size(plan.dtype));
  for (size_t i = 1; i < plan.steps.size(); ++i) {
    RelayoutStep& step = plan.steps[i];
    std::map<std::string, int64_t> held;
    for (const Layout* layout : {&step.from, &step.to}) {
      const std::vector<std::string> names = detail::mesh_device_names(layout->mesh());
      const std::vector<Box> blocks = detail::blocks_of(*layout, plan.shape);
      for (size_t k = 0; k < names.size(); ++k) held[names[k]] += blocks[k].num_elements() * esize;
    }
    for (const auto& [name, bytes] : held) step.peak_bytes = std::max(step.peak_bytes, bytes);
  }
}

bool same_blocks(const Layout& a, const Layout& b, const Shape& shape) {
  return a.mesh() == b.mesh() && detail::blocks_of(a, shape) == detail::blocks_of(b, shape);
}

// The pending reductions that combine more than one block: a Partial over a mesh dimension of
// size 1 is a sum of one term, already reduced (a 1x1 mesh's row-parallel matmul, its gradients).
std::vector<PartialDim> pending_across_devices(const Layout& layout) {
  std::vector<PartialDim> pending;
  for (const PartialDim& p : layout.partial()) {
    if (layout.mesh().dim_size(p.mesh_dim) > 1) pending.push_back(p);
  }
  return pending;
}

}  // namespace

Layout resolve_match(const Layout& from, const Layout& to) {
  if (to.is_single_device() || to.is_empty()) return to;
  if (from.rank() != to.rank() && !from.is_single_device()) {
    detail::throw_invalid(kComponent,
                          "Attempted to relayout to a different global shape: {} has rank {}, {} "
                          "has rank {}",
                          from.to_string(), from.rank(), to.to_string(), to.rank());
  }
  bool any_match = false;
  for (const ShardingSpec& s : to.sharding_specs()) any_match = any_match || s.is_match();
  if (!any_match) return to;
  std::vector<ShardingSpec> specs = to.sharding_specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!specs[i].is_match()) continue;
    const ShardingSpec& source = from.sharding_specs()[i];
    for (const std::string& m : source.mesh_dims()) {
      for (size_t j = 0; j < specs.size(); ++j) {
        if (!specs[j].is_match() && specs[j].uses(m)) {
          detail::throw_invalid(kComponent,
                                "cannot resolve 'match' on axis {} of {}: its source spec {} "
                                "uses mesh dimension {}, which axis {} of the target uses",
                                i, to.to_string(), source.to_string(), m, j);
        }
      }
    }
    specs[i] = source;
  }
  return Layout::create(to.type(), std::move(specs), to.mesh(), to.partial());
}

RelayoutPlan plan_relayout(const Shape& shape, const Layout& from, const Layout& to, DType dtype) {
  check_plannable(from, shape, "source");
  check_plannable(to, shape, "target");
  RelayoutPlan plan;
  plan.shape = shape;
  plan.dtype = dtype;
  plan.from = from;
  plan.to = resolve_match(from, to);
  const Layout& target = plan.to;
  if (from == target || (same_blocks(from, target, shape) &&
                         pending_across_devices(from) == pending_across_devices(target))) {
    return plan;  // nothing moves (at most a relabel: sharded or Partial over a size-1 dimension)
  }
  Planner planner(shape, dtype);
  if (from.mesh() != target.mesh()) {
    if (from.mesh().device_type() != target.mesh().device_type()) {
      detail::throw_invalid(kComponent, "cannot relayout from a {} mesh to a {} mesh",
                            from.mesh().device_type(), target.mesh().device_type());
    }
    Layout cur = reduce_partials(planner, from, from.without_partial(), plan.steps);
    const Layout landed = target.without_partial();
    plan.steps.push_back(planner.send_recv(cur, landed));
    add_partials(planner, landed, target, plan.steps);
    count_held_inputs(plan);
    return plan;
  }
  Layout cur = reduce_partials(planner, from, target, plan.steps);
  const Specs want = specs_of(target);
  if (specs_of(cur) != want) {
    const Layout landed = make_layout(cur.mesh(), want, cur.partial());
    std::optional<std::vector<RelayoutStep>> moves = planner.collective_moves(cur, want);
    RelayoutStep direct = planner.send_recv(cur, landed);
    // Collectives unless moving the blocks directly sends fewer bytes in total (ties go to the
    // collectives: fewer rendezvous, TF's plans).
    int64_t collective_bytes = 0;
    if (moves) {
      for (const RelayoutStep& s : *moves) collective_bytes += s.bytes_total;
    }
    if (moves && collective_bytes <= direct.bytes_total) {
      for (RelayoutStep& s : *moves) plan.steps.push_back(std::move(s));
    } else {
      plan.steps.push_back(std::move(direct));
    }
    cur = landed;
  }
  add_partials(planner, cur, target, plan.steps);
  count_held_inputs(plan);
  return plan;
}

}  // namespace tessel
