// tessel demo --layouts: a walkthrough of layouts on a 2x2 mesh, each with its text form and shard map.
#include <algorithm>
#include <iostream>
#include <string>
#include <string_view>

#include "commands.h"
#include "flags.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/shape.h"
#include "tessel/mesh/layout.h"
#include "tessel/mesh/mesh.h"
#include "tessel/mesh/shard_map.h"
#include "tessel/mesh/sharding_spec.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel demo --layouts\n"
    "\n"
    "Walks through a 2x2 mesh of CPU devices and a few ways to lay a tensor over it: replicated,\n"
    "sharded over one or both mesh dimensions, uneven shards, and a Partial (pending sum) layout.\n"
    "Each step prints the layout's text form (what Layout::from_string reads) and its shard map.\n";

// The layout's text with its (long, always the same) mesh part shortened to "mesh:...".
std::string short_text(const Layout& layout) {
  std::string text = layout.to_string();
  const std::string mesh = "mesh:" + layout.mesh().to_string();
  if (const size_t at = text.rfind(mesh); at != std::string::npos) {
    text.replace(at, mesh.size(), "mesh:...");
  }
  return text;
}

// Prints one step: a title, why it matters, the layout's text and the blocks each device holds.
void show(int step, std::string_view title, std::string_view note, const Layout& layout,
          const Shape& shape) {
  std::cout << "== " << step << ". " << title << " ==\n"
            << note << "\n"
            << "  " << short_text(layout) << "\n\n"
            << visualize(layout, shape) << "\n";
}

// --layouts and nothing else.
NoOptions parse(const Args& args) {
  bool layouts = false;
  FlagParser flags("demo");
  flags.set({"--layouts"}, layouts);
  flags.parse(args);
  return {};
}

int walk_through_layouts(NoOptions) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  std::cout
      << "A 2x2 mesh of four CPU devices, ids 0..3 in row-major order (y varies fastest):\n"
      << "  " << mesh.to_string() << "\n"
      << "Each layout below prints as '<specs>, mesh:<this mesh>'; the mesh part is shortened to\n"
      << "'mesh:...'.\n\n";

  const Shape shape{8, 6};
  show(1, "replicated", "Every device holds the whole [8,6] tensor.", Layout::replicated(mesh, 2),
       shape);
  show(2, "batch-sharded over x",
       "Rows are split over x; each half is replicated over y (devices 0,1 and 2,3).",
       Layout::batch_sharded(mesh, "x", 2), shape);
  show(3, "x,y", "Rows split over x, columns over y: every device holds a distinct [4,3] block.",
       Layout({"x", "y"}, mesh), shape);
  show(4, "y,x", "The same blocks assigned transposed: rows follow y, columns follow x.",
       Layout({"y", "x"}, mesh), shape);
  show(5, "x+y on one dimension (tessel extension)",
       "Rows split four ways over x and y together, x major: shard = 2*x + y.",
       Layout({"x+y", "unsharded"}, mesh), shape);
  show(6, "uneven shards",
       "[5,3] over x,y: chunk = ceil(n/shards), leading shards full, the last one short.",
       Layout({"x", "y"}, mesh), Shape{5, 3});
  show(7, "Partial: pending sum over y (tessel extension)",
       "Rows split over x; the two devices along y each hold an addend, and the value is their\n"
       "sum. Ops linear in the tensor keep it Partial; anything else reduces first.",
       Layout::create(LayoutType::kStatic, {ShardingSpec::sharded({"x"}), ShardingSpec()}, mesh,
                      {PartialDim{"y", ReduceOp::kSum}}),
       shape);
  std::cout << "Try your own: tessel layout 'sharding_specs:x,unsharded, mesh:|x=2,y=2|*CPU' "
               "--shape 8,6\n";
  return kExitOk;
}

}  // namespace

int run_demo(const Args& args) {
  if (std::find(args.begin(), args.end(), "--layouts") == args.end()) return run_demo_train(args);
  return run_command(args, kHelp, parse, walk_through_layouts);
}

}  // namespace tessel::cli
