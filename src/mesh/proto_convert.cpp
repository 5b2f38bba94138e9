// Mesh and Layout <-> tessel.proto.MeshProto / LayoutProto (wire-compatible with TF's).
#include "core/errors.h"
#include "mesh/mesh_data.h"
#include "tessel/mesh/layout.h"
#include "tessel/proto/layout.pb.h"

namespace tessel {
namespace {

proto::MeshProto to_proto(const Mesh& mesh) {
  const Mesh::Data& d = MeshBuilder::data(mesh);
  proto::MeshProto p;
  for (const MeshDimension& dim : d.dims) {
    proto::MeshDimensionProto* out = p.add_mesh_dimensions();
    out->set_name(dim.name);
    out->set_size(dim.size);
  }
  for (int64_t id : d.global_ids) p.add_global_device_ids(id);
  for (int64_t id : d.local_ids) p.add_local_device_ids(id);
  for (const std::string& s : d.local_devices) p.add_local_devices(s);
  for (const std::string& s : d.global_devices) p.add_global_devices(s);
  p.set_name(d.name);
  p.set_use_xla_spmd(d.use_xla_spmd);
  if (!d.single_device.empty()) p.set_single_device(d.single_device);
  return p;
}

Mesh from_proto_message(const proto::MeshProto& p) {
  if (!p.single_device().empty()) return Mesh::from_device(p.single_device());
  Mesh::Data d;
  for (const proto::MeshDimensionProto& dim : p.mesh_dimensions()) {
    d.dims.push_back({dim.name(), dim.size()});
  }
  d.global_ids.assign(p.global_device_ids().begin(), p.global_device_ids().end());
  d.local_ids.assign(p.local_device_ids().begin(), p.local_device_ids().end());
  d.local_devices.assign(p.local_devices().begin(), p.local_devices().end());
  d.global_devices.assign(p.global_devices().begin(), p.global_devices().end());
  d.name = p.name();
  d.use_xla_spmd = p.use_xla_spmd();
  // TF only checks the dim product here; tessel validates a proto like any other mesh.
  return MeshBuilder::build(std::move(d), MeshOrigin::kParser);
}

}  // namespace

std::string Mesh::as_proto() const { return to_proto(*this).SerializeAsString(); }

Mesh Mesh::from_proto(const std::string& bytes) {
  proto::MeshProto p;
  if (!p.ParseFromString(bytes)) {
    detail::throw_invalid("Mesh", "from_proto: {} bytes are not a MeshProto", bytes.size());
  }
  return from_proto_message(p);
}

std::string Layout::as_proto() const {
  proto::LayoutProto p;
  for (const ShardingSpec& spec : sharding_specs()) {
    p.add_sharding_specs()->set_sharding_spec(spec.to_string());
  }
  *p.mutable_mesh_config() = to_proto(mesh());
  switch (type()) {
    case LayoutType::kEmpty: p.set_type(proto::LayoutProto::UNKNOWN); break;
    case LayoutType::kStatic: p.set_type(proto::LayoutProto::STATIC); break;
    case LayoutType::kParted: p.set_type(proto::LayoutProto::PARTED); break;
    case LayoutType::kSingleDevice: p.set_type(proto::LayoutProto::SINGLE_DEVICE); break;
  }
  for (const PartialDim& dim : partial()) {
    proto::PartialDimProto* out = p.add_partial();
    out->set_mesh_dim(dim.mesh_dim);
    out->set_reduce_op(std::string(reduce_op_name(dim.op)));
  }
  return p.SerializeAsString();
}

Layout Layout::from_proto(const std::string& bytes) {
  proto::LayoutProto p;
  if (!p.ParseFromString(bytes)) {
    detail::throw_invalid("Layout", "from_proto: {} bytes are not a LayoutProto", bytes.size());
  }
  const Mesh mesh = from_proto_message(p.mesh_config());
  LayoutType type = LayoutType::kStatic;
  switch (p.type()) {
    // TF maps UNKNOWN to the empty layout, so protos written before the type field existed no
    // longer parse; tessel reads UNKNOWN with a real mesh as STATIC.
    case proto::LayoutProto::UNKNOWN:
      type = mesh.is_empty() ? LayoutType::kEmpty
                             : (mesh.is_single_device() ? LayoutType::kSingleDevice
                                                        : LayoutType::kStatic);
      break;
    case proto::LayoutProto::STATIC: type = LayoutType::kStatic; break;
    case proto::LayoutProto::PARTED: type = LayoutType::kParted; break;
    case proto::LayoutProto::SINGLE_DEVICE: type = LayoutType::kSingleDevice; break;
    default:
      detail::throw_invalid("Layout", "from_proto: unknown layout type {}",
                            static_cast<int>(p.type()));
  }
  std::vector<ShardingSpec> specs;
  for (const proto::ShardingSpec& s : p.sharding_specs()) {
    specs.push_back(ShardingSpec::parse(s.sharding_spec()));
  }
  std::vector<PartialDim> partial;
  for (const proto::PartialDimProto& d : p.partial()) {
    partial.push_back({d.mesh_dim(), reduce_op_from_name(d.reduce_op())});
  }
  return create(type, std::move(specs), mesh, std::move(partial));
}

}  // namespace tessel
