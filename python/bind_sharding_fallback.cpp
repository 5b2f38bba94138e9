// Bindings of the sharding fallback (dtensor: tessel/dtensor/sharding_fallback.h): the records of
// ops that had no sharding rule for their inputs' layouts, and strict mode.
#include <string>

#include "casters.h"
#include "tessel/dtensor/sharding_fallback.h"

namespace tessel::python {

void bind_sharding_fallback(py::module_& m) {
  py::class_<FallbackRecord>(m, "FallbackRecord",
                             "One (op, input layouts) pair that fell back since the last reset: "
                             "its calls and the bytes their relayouts sent between devices; "
                             "unpacks as (op, layouts, count, bytes).")
      .def_readonly("op", &FallbackRecord::op)
      .def_readonly("layouts", &FallbackRecord::layouts)
      .def_readonly("count", &FallbackRecord::count)
      .def_readonly("bytes", &FallbackRecord::bytes)
      .def("__iter__",
           [](const FallbackRecord& r) {
             return py::iter(py::make_tuple(r.op, r.layouts, r.count, r.bytes));
           })
      .def("__repr__", [](const FallbackRecord& r) {
        return "FallbackRecord(op='" + r.op + "', layouts=" + std::to_string(r.layouts.size()) +
               ", count=" + std::to_string(r.count) + ", bytes=" + std::to_string(r.bytes) + ")";
      });
  m.def("sharding_fallbacks", &sharding_fallbacks,
        "Every (op, input layouts) pair that fell back since the last reset (FallbackRecords, "
        "by op, then layouts).");
  m.def("reset_sharding_fallbacks", &reset_sharding_fallbacks,
        "Forgets every record; the next fallback of each pair warns again.");
  m.def("sharding_fallbacks_text", &sharding_fallbacks_text,
        "The records as text, one line per pair; '' when none.");
  m.def("set_sharding_fallback_strict", &set_sharding_fallback_strict, py::arg("strict"),
        "Strict mode: an op without a sharding rule for its inputs' layouts raises "
        "NotImplementedError instead of falling back.");
  m.def("sharding_fallback_strict", &sharding_fallback_strict,
        "Whether strict mode is on (default: TESSEL_STRICT_SHARDING, else off).");
}

}  // namespace tessel::python
