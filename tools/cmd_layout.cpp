// tessel layout: parse and validate a layout, then show its mesh, shard counts and shard map.
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "tessel/core/error.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/shape.h"
#include "tessel/mesh/layout.h"
#include "tessel/mesh/mesh.h"
#include "tessel/mesh/mesh_spec.h"
#include "tessel/mesh/shard_map.h"

namespace tessel::cli {
namespace {

constexpr const char* kHelp =
    "usage: tessel layout '<layout string>' [--shape D0,D1,...]\n"
    "       tessel layout --mesh '<mesh string>' --specs S0,S1,... [--shape D0,D1,...]\n"
    "\n"
    "Parses and validates a layout, prints its text form, mesh, shards per tensor dimension\n"
    "and, given a global shape, which device holds which block.\n"
    "\n"
    "  <layout string>  TensorFlow's text form, with tessel's extensions, e.g.\n"
    "                   'sharding_specs:x,unsharded, mesh:|x=2,y=2|*CPU'\n"
    "                   'sharding_specs:x+y,unsharded, partial:sum(y), mesh:|x=2,y=2|*CPU'\n"
    "  --mesh M         a mesh: x=2,y=2 (CPU devices) or TF's '|x=2,y=2|*CPU' (with --specs)\n"
    "  --specs S        one sharding spec per tensor dimension: a mesh dimension, x+y,\n"
    "                   unsharded or match, e.g. x,unsharded\n"
    "  --shape D        the tensor's global shape, e.g. 8,6; its rank must equal the layout's\n"
    "\n"
    "Bad input prints 'tessel: error: <reason>' and exits with status 2.\n";

struct Options {
  std::optional<std::string> layout;  // full layout string (positional)
  std::optional<std::string> mesh;    // --mesh
  std::optional<std::string> specs;   // --specs
  std::optional<std::string> shape;   // --shape
};

// --specs "a,b,c" as a list; "" is the empty list (a rank-0 layout).
std::vector<std::string> specs_list(const std::string& text) {
  return text.empty() ? std::vector<std::string>{} : split_list(text, ',');
}

Options parse_args(const Args& args) {
  Options opts;
  FlagParser flags("layout");
  flags.text({"--shape"}, opts.shape);
  flags.text({"--mesh"}, opts.mesh);
  flags.text({"--specs"}, opts.specs);
  flags.positional([&](const std::string& argument) {
    if (opts.layout) {
      flags.fail("more than one layout string given ('" + *opts.layout + "' and '" + argument +
                 "')");
    }
    opts.layout = argument;
  });
  flags.parse(args);
  if (opts.layout && (opts.mesh || opts.specs)) {
    flags.fail("give either a layout string or --mesh and --specs, not both");
  }
  if (!opts.layout && !(opts.mesh && opts.specs)) {
    flags.fail("give a layout string, or --mesh and --specs");
  }
  return opts;
}

std::string_view type_name(LayoutType type) {
  switch (type) {
    case LayoutType::kEmpty:
      return "empty";
    case LayoutType::kStatic:
      return "static";
    case LayoutType::kParted:
      return "parted";
    case LayoutType::kSingleDevice:
      return "single device";
  }
  return "unknown";
}

// "x=2, y=2 (4 devices, CPU)"; the single-device and empty meshes by name.
std::string describe_mesh(const Mesh& mesh) {
  if (mesh.is_empty()) return "empty mesh";
  if (mesh.is_single_device()) return "single device " + mesh.single_device();
  std::string text;
  for (const MeshDimension& d : mesh.dims()) {
    if (!text.empty()) text += ", ";
    text += d.name + "=" + std::to_string(d.size);
  }
  text += " (" + std::to_string(mesh.size()) + " devices, " +
          std::to_string(mesh.num_local_devices()) + " local, " + mesh.device_type() + ")";
  return text;
}

// One line per tensor dimension: its spec and how many shards it is split into.
void print_shards(const Layout& layout) {
  std::cout << "shards per dim:\n";
  if (layout.rank() == 0) std::cout << "  (rank 0: a scalar, nothing to split)\n";
  for (int axis = 0; axis < layout.rank(); ++axis) {
    const ShardingSpec& spec = layout.sharding_specs()[static_cast<size_t>(axis)];
    std::cout << "  dim " << axis << ": " << spec.to_string() << " -> ";
    if (spec.is_match() || spec.is_any()) {
      std::cout << "decided by the source layout\n";  // match/any have no shard count
    } else {
      std::cout << layout.num_shards(axis) << " shard(s)\n";
    }
  }
  for (const PartialDim& p : layout.partial()) {
    std::cout << "  partial: pending " << reduce_op_name(p.op) << " over mesh dim " << p.mesh_dim
              << "\n";
  }
}

// Prints the layout, its shards and, with --shape, the shard map.
int show(const Options& opts) {
  // Parse first, so that tessel's own message reaches the user (main prints Error::what()).
  const Layout layout = opts.layout
                            ? Layout::from_string(*opts.layout)
                            : Layout(specs_list(*opts.specs), parse_mesh(*opts.mesh));
  // With a shape: check its rank and draw the map before printing, so a rejected shape prints
  // only the error.
  std::optional<Shape> shape;
  std::string largest_shard;
  std::string shard_map;
  if (opts.shape) {
    shape = Shape::parse(*opts.shape);
    if (shape->rank() != layout.rank()) {
      throw Error(ErrorCode::kInvalidArgument, "layout",
                  "--shape " + shape->to_string() + " has rank " + std::to_string(shape->rank()) +
                      " but the layout has rank " + std::to_string(layout.rank()));
    }
    largest_shard = layout.local_shape_from_global_shape(*shape).to_string();
    shard_map = visualize(layout, *shape);
  }

  std::cout << "layout:         " << layout.to_string() << "\n"
            << "type:           " << type_name(layout.type()) << ", rank " << layout.rank() << "\n"
            << "mesh:           " << layout.mesh().to_string() << "\n"
            << "mesh dims:      " << describe_mesh(layout.mesh()) << "\n";
  print_shards(layout);
  if (!shape) {
    std::cout << "\n(pass --shape to draw the shard map)\n";
    return kExitOk;
  }
  std::cout << "global shape:   " << shape->to_string() << "\n"
            << "largest shard:  " << largest_shard << "\n\n"
            << "shard map:\n"
            << shard_map;
  return kExitOk;
}

}  // namespace

int run_layout(const Args& args) { return run_command(args, kHelp, parse_args, show); }

}  // namespace tessel::cli
