// Bindings of the alloc layer: ScopedField, scoped_layout, ScopedAllocator,
// ScopedAllocatorManager, FusionTensor, FusionOptions, FusionBucket, FusionPlan, plan_fusion,
// FusedAllReducer. Collective calls release the GIL: each rank calls from its own Python thread.
#include "casters.h"
#include "tessel/alloc/fused_all_reduce.h"
#include "tessel/alloc/fusion.h"
#include "tessel/alloc/scoped_allocator.h"
#include "tessel/alloc/scoped_allocator_manager.h"
#include "tessel/comm/collective_options.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/tensor.h"

namespace tessel::python {

void bind_alloc(py::module_& m) {
  using Release = py::call_guard<py::gil_scoped_release>;

  py::class_<ScopedField>(m, "ScopedField", "One field of a scoped allocator's backing buffer.")
      .def_readonly("shape", &ScopedField::shape)
      .def_readonly("offset", &ScopedField::offset)
      .def_readonly("bytes_requested", &ScopedField::bytes_requested)
      .def_readonly("bytes_allocated", &ScopedField::bytes_allocated)
      .def_readonly("scope_id", &ScopedField::scope_id);
  m.def(
      "scoped_layout",
      [](const std::vector<Shape>& shapes, DType dtype, int64_t scope_id) {
        int64_t total = 0;
        std::vector<ScopedField> fields = scoped_layout(shapes, dtype, scope_id, &total);
        return py::make_tuple(fields, total);
      },
      py::arg("shapes"), py::arg("dtype"), py::arg("scope_id") = 0,
      "(fields, total_bytes): TF's layout, fields at 64-byte-aligned offsets.");

  // Shared holder: a scope from ScopedAllocatorManager.add/get lives as long as its handle.
  py::class_<ScopedAllocator, std::shared_ptr<ScopedAllocator>>(
      m, "ScopedAllocator", "Many tensors carved out of one backing buffer (no copies).")
      .def(py::init([](std::vector<Shape> shapes, DType dtype, std::string name, int64_t scope_id,
                       int expected_call_count, const std::vector<int64_t>& field_scope_ids) {
             return std::make_shared<ScopedAllocator>(std::move(shapes), dtype, std::move(name),
                                                      scope_id, expected_call_count, nullptr,
                                                      field_scope_ids);
           }),
           py::arg("shapes"), py::arg("dtype"), py::arg("name"), py::arg("scope_id"),
           py::arg("expected_call_count"), py::arg("field_scope_ids") = std::vector<int64_t>{})
      .def_property_readonly("name", &ScopedAllocator::name)
      .def_property_readonly("scope_id", &ScopedAllocator::scope_id)
      .def_property_readonly("dtype", &ScopedAllocator::dtype)
      .def_property_readonly("fields", &ScopedAllocator::fields)
      .def_property_readonly("total_bytes", &ScopedAllocator::total_bytes)
      .def_property_readonly("backing", &ScopedAllocator::backing)
      .def(
          "allocate",
          [](ScopedAllocator& s, int field, size_t bytes) { return s.allocate(field, bytes); },
          py::arg("field_index"), py::arg("bytes"))
      .def(
          "allocate_shape",
          [](ScopedAllocator& s, int field, const Shape& shape) {
            return s.allocate(field, shape);
          },
          py::arg("field_index"), py::arg("shape"))
      .def("field_view", &ScopedAllocator::field_view, py::arg("field_index"))
      .def_property_readonly("calls_made", &ScopedAllocator::calls_made)
      .def_property_readonly("calls_remaining", &ScopedAllocator::calls_remaining)
      .def(
          "concat",
          [](const ScopedAllocator& s, const Tensor& backing, const std::vector<Tensor>& aliases,
             const std::optional<Shape>& shape, bool reshape) {
            if (!shape) return s.concat(backing, aliases);
            return s.concat(backing, aliases, *shape, reshape);
          },
          py::arg("backing"), py::arg("aliases"), py::arg("shape") = py::none(),
          py::arg("reshape") = false,
          "TF's _ScopedAllocatorConcat: with shape, its checks; reshape=True views the backing "
          "as shape.")
      .def("split", &ScopedAllocator::split, py::arg("concat"), py::arg("aliases"))
      .def("close", &ScopedAllocator::close)
      .def_property_readonly("closed", &ScopedAllocator::closed)
      .def("reopen", &ScopedAllocator::reopen, py::arg("expected_call_count"));

  py::class_<ScopedAllocatorManager>(m, "ScopedAllocatorManager",
                                     "One device's live scoped allocators by (step, scope id).")
      .def(py::init([](std::string device) {
             return std::make_unique<ScopedAllocatorManager>(std::move(device));
           }),
           py::arg("device_name"))
      .def_property_readonly("device_name", &ScopedAllocatorManager::device_name)
      .def("add", &ScopedAllocatorManager::add, py::arg("step_id"), py::arg("scope_id"),
           py::arg("name"), py::arg("shapes"), py::arg("dtype"), py::arg("expected_call_count"),
           py::arg("field_scope_ids") = std::vector<int64_t>{},
           "field_scope_ids: TF's explicit Field scope ids (default: scope_id + 1 + i).")
      .def("get", &ScopedAllocatorManager::get, py::arg("step_id"), py::arg("scope_id"))
      .def("allocate", &ScopedAllocatorManager::allocate, py::arg("step_id"),
           py::arg("field_scope_id"), py::arg("bytes"))
      .def("release", &ScopedAllocatorManager::release, py::arg("step_id"), py::arg("scope_id"))
      .def("cleanup_step", &ScopedAllocatorManager::cleanup_step, py::arg("step_id"))
      .def_property_readonly("num_live_scopes", &ScopedAllocatorManager::num_live_scopes);

  py::class_<FusionTensor>(m, "FusionTensor")
      .def(py::init([](std::string name, Shape shape, DType dtype, std::string group) {
             return FusionTensor{std::move(name), std::move(shape), dtype, std::move(group)};
           }),
           py::arg("name"), py::arg("shape"), py::arg("dtype") = DType::kF32, py::arg("group") = "")
      .def_readwrite("name", &FusionTensor::name)
      .def_readwrite("shape", &FusionTensor::shape)
      .def_readwrite("dtype", &FusionTensor::dtype)
      .def_readwrite("group", &FusionTensor::group);
  py::class_<FusionOptions>(m, "FusionOptions")
      .def(py::init([](int64_t bytes_per_pack, int num_packs) {
             return FusionOptions{bytes_per_pack, num_packs};
           }),
           py::arg("bytes_per_pack") = 0, py::arg("num_packs") = 0)
      .def_readwrite("bytes_per_pack", &FusionOptions::bytes_per_pack)
      .def_readwrite("num_packs", &FusionOptions::num_packs);
  py::class_<FusionBucket>(m, "FusionBucket")
      .def_readonly("dtype", &FusionBucket::dtype)
      .def_readonly("group", &FusionBucket::group)
      .def_readonly("tensors", &FusionBucket::tensors)
      .def_readonly("bytes", &FusionBucket::bytes)
      .def_readonly("padded_bytes", &FusionBucket::padded_bytes);
  py::class_<FusionPlan>(m, "FusionPlan")
      .def_readonly("tensors", &FusionPlan::tensors)
      .def_readonly("buckets", &FusionPlan::buckets)
      .def_readonly("bucket_of", &FusionPlan::bucket_of)
      .def_readonly("field_of", &FusionPlan::field_of)
      .def("report", &FusionPlan::report)
      .def("__str__", &FusionPlan::report);
  m.def("plan_fusion", &plan_fusion, py::arg("tensors"), py::arg("options") = FusionOptions{});

  const CollectiveOptions defaults;
  py::class_<FusedAllReducer>(m, "FusedAllReducer",
                              "Batch all-reduce: one collective per fusion bucket.")
      .def(py::init([](Communicator& comm, const std::vector<FusionTensor>& tensors,
                       const FusionOptions& options, int64_t scope_id) {
             return std::make_unique<FusedAllReducer>(comm, tensors, options, nullptr, scope_id);
           }),
           py::arg("comm"), py::arg("tensors"), py::arg("options") = FusionOptions{},
           py::arg("scope_id") = 0, py::keep_alive<1, 2>())
      .def_property_readonly("plan", &FusedAllReducer::plan)
      .def_property_readonly("num_buckets", &FusedAllReducer::num_buckets)
      .def("tensor_view", &FusedAllReducer::tensor_view, py::arg("tensor_index"))
      .def("all_reduce", &FusedAllReducer::all_reduce, py::arg("inputs"),
           py::arg("op") = ReduceOp::kSum, py::arg("options") = defaults, Release())
      .def("all_reduce_buckets", &FusedAllReducer::all_reduce_buckets,
           py::arg("op") = ReduceOp::kSum, py::arg("options") = defaults, Release())
      .def_property_readonly("last_copied_bytes", &FusedAllReducer::last_copied_bytes)
      .def_property_readonly("steps", &FusedAllReducer::steps);
}

}  // namespace tessel::python
