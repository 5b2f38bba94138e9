// Bindings of the core layer: errors, dtypes, Tensor <-> numpy, DeviceName, ReduceOp, host memory.
#include <array>
#include <cstring>
#include <optional>

#include <pybind11/operators.h>

#include "casters.h"
#include "tessel/core/blas.h"
#include "tessel/core/byte_size.h"
#include "tessel/core/crc32c.h"
#include "tessel/core/device_name.h"
#include "tessel/core/error.h"
#include "tessel/core/float16.h"
#include "tessel/core/host_memory.h"
#include "tessel/core/matmul_precision.h"
#include "tessel/core/median.h"
#include "tessel/core/parallel.h"
#include "tessel/core/reduce_op.h"
#include "tessel/core/tensor.h"

namespace tessel::python {
namespace {

// ---- errors -------------------------------------------------------------------------------

constexpr int kNumCodes = kNumErrorCodes;
// One Python class per ErrorCode; created once, never freed (lives as long as the module).
std::array<PyObject*, kNumCodes> g_error_classes{};

struct ErrorClass {
  ErrorCode code;
  const char* name;   // Python class name, TensorFlow's tf.errors names
  PyObject* builtin;  // the builtin exception it also derives from
};

void bind_errors(py::module_& m) {
  PyObject* base = PyErr_NewExceptionWithDoc(
      "tessel.Error", "Base of every error tessel raises; .code names the ErrorCode.",
      PyExc_Exception, nullptr);
  if (base == nullptr) throw py::error_already_set();
  m.add_object("Error", base);
  const ErrorClass classes[] = {
      {ErrorCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError},
      {ErrorCode::kFailedPrecondition, "FailedPreconditionError", PyExc_RuntimeError},
      {ErrorCode::kOutOfRange, "OutOfRangeError", PyExc_IndexError},
      {ErrorCode::kNotFound, "NotFoundError", PyExc_ValueError},
      {ErrorCode::kAlreadyExists, "AlreadyExistsError", PyExc_RuntimeError},
      {ErrorCode::kUnimplemented, "UnimplementedError", PyExc_NotImplementedError},
      {ErrorCode::kUnavailable, "UnavailableError", PyExc_RuntimeError},
      {ErrorCode::kDeadlineExceeded, "DeadlineExceededError", PyExc_TimeoutError},
      {ErrorCode::kAborted, "AbortedError", PyExc_RuntimeError},
      {ErrorCode::kResourceExhausted, "ResourceExhaustedError", PyExc_MemoryError},
      {ErrorCode::kInternal, "InternalError", PyExc_RuntimeError},
      {ErrorCode::kDataLoss, "DataLossError", PyExc_RuntimeError},
  };
  for (const ErrorClass& c : classes) {
    py::dict attrs;
    attrs["code"] = std::string(error_code_name(c.code));
    py::tuple bases = py::make_tuple(py::handle(base), py::handle(c.builtin));
    std::string qualified = std::string("tessel.") + c.name;
    PyObject* cls = PyErr_NewException(qualified.c_str(), bases.ptr(), attrs.ptr());
    if (cls == nullptr) throw py::error_already_set();
    g_error_classes[static_cast<size_t>(c.code)] = cls;
    m.add_object(c.name, cls);
  }

  // tessel::Error -> the class of its code; the message is what(), and .component/.message
  // carry the two parts.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyObject* cls = g_error_classes[static_cast<size_t>(e.code())];
      py::object exc = py::reinterpret_borrow<py::object>(cls)(e.what());
      exc.attr("component") = e.component();
      exc.attr("message") = e.message();
      PyErr_SetObject(cls, exc.ptr());
    }
  });

  py::enum_<ErrorCode>(m, "ErrorCode")
      .value("INVALID_ARGUMENT", ErrorCode::kInvalidArgument)
      .value("FAILED_PRECONDITION", ErrorCode::kFailedPrecondition)
      .value("OUT_OF_RANGE", ErrorCode::kOutOfRange)
      .value("NOT_FOUND", ErrorCode::kNotFound)
      .value("ALREADY_EXISTS", ErrorCode::kAlreadyExists)
      .value("UNIMPLEMENTED", ErrorCode::kUnimplemented)
      .value("UNAVAILABLE", ErrorCode::kUnavailable)
      .value("DEADLINE_EXCEEDED", ErrorCode::kDeadlineExceeded)
      .value("ABORTED", ErrorCode::kAborted)
      .value("RESOURCE_EXHAUSTED", ErrorCode::kResourceExhausted)
      .value("INTERNAL", ErrorCode::kInternal)
      .value("DATA_LOSS", ErrorCode::kDataLoss);
  m.def("error_code_name", &error_code_name, py::arg("code"));
  // Raises the Python class of `code`, as a C++ call failing with Error(code, ...) would.
  m.def(
      "_raise_error",
      [](ErrorCode code, const std::string& component, const std::string& message) {
        throw Error(code, component, message);
      },
      py::arg("code"), py::arg("component"), py::arg("message"));
}

// ---- dtypes -------------------------------------------------------------------------------

void bind_dtypes(py::module_& m) {
  m.def("dtype_size", &dtype_size, py::arg("dtype"));
  m.def("dtype_name", &dtype_name, py::arg("dtype"), "The short name of any accepted dtype.");
  m.def("is_floating", &is_floating, py::arg("dtype"));
  m.def("float_to_bf16_bits", &float_to_bf16_bits, py::arg("value"));
  m.def("bf16_bits_to_float", &bf16_bits_to_float, py::arg("bits"));
  m.def("float_to_f16_bits", &float_to_f16_bits, py::arg("value"));
  m.def("f16_bits_to_float", &f16_bits_to_float, py::arg("bits"));
}

// ---- Tensor <-> numpy ---------------------------------------------------------------------

}  // namespace

// A copy of any array-like; its numpy dtype name selects the DType (numpy's names are accepted
// by dtype_from_name). With `dtype`, the copy is then converted. An ndarray is read as it is,
// whatever its strides and byte order (numpy copies it into the tensor's storage): a broadcast
// view (strides 0) costs only the tensor's own bytes, and a tensor too large to allocate is
// tessel's kResourceExhausted naming its size, not a failed conversion.
Tensor tensor_from_numpy(py::handle data, std::optional<DType> dtype) {
  const py::array array = py::array::ensure(data);
  if (!array) throw py::type_error("Tensor.from_numpy: cannot convert the argument to an ndarray");
  const DType source = dtype_from_name(py::str(array.dtype().attr("name")).cast<std::string>());
  const std::vector<py::ssize_t> dims(array.shape(), array.shape() + array.ndim());
  Tensor t = Tensor::empty(Shape(std::vector<int64_t>(dims.begin(), dims.end())), source, nullptr,
                           /*zero_fill=*/false);  // every byte is copied below
  if (t.nbytes() > 0) {
    // A numpy view of the tensor's storage (the capsule base keeps numpy from copying it); it
    // lives only for the copy.
    const py::array storage(py::dtype(numpy_dtype_name(source)), dims, t.data(),
                            py::capsule(t.data(), [](void*) {}));
    // numpy's C copy (what np.copyto does), without importing numpy and calling into Python on
    // every conversion; it broadcasts and swaps byte order as needed.
    if (py::detail::npy_api::get().PyArray_CopyInto_(storage.ptr(), array.ptr()) != 0) {
      throw py::error_already_set();
    }
  }
  if (dtype && *dtype != source) return t.astype(*dtype);
  return t;
}

Tensor to_tensor(py::handle obj) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  return tensor_from_numpy(obj, std::nullopt);
}

namespace {

// A contiguous numpy copy (bf16 converted to float32).
py::array tensor_to_numpy(const Tensor& t) {
  Tensor c = t.dtype() == DType::kBF16 ? t.astype(DType::kF32) : t.contiguous();
  const std::vector<int64_t>& dims = c.shape().dims();
  py::array out(py::dtype(numpy_dtype_name(c.dtype())),  // c is never bf16
                std::vector<py::ssize_t>(dims.begin(), dims.end()));
  if (c.nbytes() > 0) std::memcpy(out.mutable_data(), c.data(), c.nbytes());
  return out;
}

// numpy's __array__(dtype=None, copy=None). numpy 2 passes `copy` (numpy 1 never does) and
// warns when the method does not take it. The result is always a new array (tensor_to_numpy
// copies), so copy=False, "never copy", cannot be honoured: numpy's protocol asks for a
// ValueError then, which InvalidArgumentError is.
py::object tensor_array_protocol(const Tensor& t, const py::object& dtype, const py::object& copy) {
  if (!copy.is_none() && !copy.cast<bool>()) {
    throw Error(ErrorCode::kInvalidArgument, "Tensor.__array__",
                "copy=False: a Tensor reaches numpy only as a copy; use copy=None or True");
  }
  py::array a = tensor_to_numpy(t);
  if (dtype.is_none()) return a;
  return a.attr("astype")(dtype);
}

void bind_tensor(py::module_& m) {
  py::class_<MemorySpace>(m, "MemorySpace", "Where an allocation lives: the host, or a GPU.")
      .def_static("host", &MemorySpace::host)
      .def_static("cuda", &MemorySpace::cuda, py::arg("ordinal"))
      .def_static("simulated_gpu", &MemorySpace::simulated_gpu, py::arg("ordinal"))
      .def_property_readonly("is_host", &MemorySpace::is_host)
      .def_readonly("device_ordinal", &MemorySpace::device_ordinal)
      .def("to_string", &MemorySpace::to_string)
      .def("__str__", &MemorySpace::to_string)
      .def("__repr__", [](const MemorySpace& s) { return "MemorySpace(" + s.to_string() + ")"; })
      .def(py::self == py::self);
  py::class_<Tensor> cls(m, "Tensor", R"doc(
An n-dimensional host array; a handle to reference-counted storage (views share it).

Tensor(array, dtype=None) copies any array-like (numpy dtype selects the tensor dtype).
numpy() returns a copy; bf16 tensors come back as float32 because numpy has no bfloat16,
f16 tensors as float16. Dtypes are names ("f32", "bf16", ...) and accept numpy dtypes.)doc");
  cls.def(py::init<>())
      .def(py::init(&tensor_from_numpy), py::arg("array"), py::arg("dtype") = py::none())
      .def_static("from_numpy", &tensor_from_numpy, py::arg("array"), py::arg("dtype") = py::none())
      .def_static("zeros", &Tensor::zeros, py::arg("shape"), py::arg("dtype") = DType::kF32)
      .def_static("full", &Tensor::full, py::arg("shape"), py::arg("dtype"), py::arg("value"))
      .def_static("random_uniform", &Tensor::random_uniform, py::arg("shape"),
                  py::arg("dtype") = DType::kF32, py::arg("seed") = 0, py::arg("low") = 0.0,
                  py::arg("high") = 1.0)
      .def_static("random_normal", &Tensor::random_normal, py::arg("shape"),
                  py::arg("dtype") = DType::kF32, py::arg("seed") = 0, py::arg("mean") = 0.0,
                  py::arg("stddev") = 1.0)
      .def_static("random_uniform_block", &Tensor::random_uniform_block, py::arg("global_shape"),
                  py::arg("offsets"), py::arg("extents"), py::arg("dtype") = DType::kF32,
                  py::arg("seed") = 0, py::arg("low") = 0.0, py::arg("high") = 1.0)
      .def_static("random_normal_block", &Tensor::random_normal_block, py::arg("global_shape"),
                  py::arg("offsets"), py::arg("extents"), py::arg("dtype") = DType::kF32,
                  py::arg("seed") = 0, py::arg("mean") = 0.0, py::arg("stddev") = 1.0)
      .def("numpy", &tensor_to_numpy)
      .def("__array__", &tensor_array_protocol, py::arg("dtype") = py::none(),
           py::arg("copy") = py::none())
      .def_property_readonly("defined", &Tensor::defined)
      .def_property_readonly("shape", &Tensor::shape)
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("rank", &Tensor::rank)
      .def_property_readonly("num_elements", &Tensor::num_elements)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("memory_space", &Tensor::memory_space)
      .def("to_host", &Tensor::to_host,
           "This tensor if in host memory, else a contiguous host copy of it.")
      .def_property_readonly("strides", &Tensor::strides)
      .def_property_readonly("storage_offset", &Tensor::storage_offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("shares_storage_with", &Tensor::shares_storage_with, py::arg("other"))
      .def("at", &Tensor::at, py::arg("index"))
      .def("to_doubles", &Tensor::to_doubles)
      .def("slice", &Tensor::slice, py::arg("axis"), py::arg("start"), py::arg("stop"))
      .def("block", &Tensor::block, py::arg("offsets"), py::arg("extents"))
      .def("reshape", &Tensor::reshape, py::arg("shape"))
      .def("clone", &Tensor::clone)
      .def("contiguous", &Tensor::contiguous)
      .def("astype", &Tensor::astype, py::arg("dtype"))
      .def("fill", &Tensor::fill, py::arg("value"))
      .def("copy_from", &Tensor::copy_from, py::arg("src"))
      .def("to_string", &Tensor::to_string, py::arg("edge_items") = 3)
      .def("__str__", [](const Tensor& t) { return t.to_string(); })
      .def("__repr__", [](const Tensor& t) { return t.to_string(); })
      .def(py::pickle(  // via numpy; bf16 survives the float32 detour exactly
          [](const Tensor& t) { return py::make_tuple(tensor_to_numpy(t), t.dtype()); },
          [](const py::tuple& s) { return tensor_from_numpy(s[0], s[1].cast<DType>()); }));
  implicitly_convertible_per_thread<py::array, Tensor>();

  m.def("tensor", &tensor_from_numpy, py::arg("data"), py::arg("dtype") = py::none(),
        "A Tensor holding a copy of `data` (any array-like).");
  m.def("allclose", &allclose, py::arg("a"), py::arg("b"), py::arg("rtol") = 1e-5,
        py::arg("atol") = 1e-8, py::arg("equal_nan") = false);
}

// ---- DeviceName, ReduceOp -----------------------------------------------------------------

void bind_device_name(py::module_& m) {
  using OptStr = std::optional<std::string>;
  using OptInt = std::optional<int>;
  py::class_<DeviceName>(m, "DeviceName")
      .def(py::init([](OptStr job, OptInt replica, OptInt task, OptStr type, OptInt id) {
             return DeviceName{std::move(job), replica, task, std::move(type), id};
           }),
           py::arg("job") = py::none(), py::arg("replica") = py::none(),
           py::arg("task") = py::none(), py::arg("type") = py::none(), py::arg("id") = py::none())
      .def_readwrite("job", &DeviceName::job)
      .def_readwrite("replica", &DeviceName::replica)
      .def_readwrite("task", &DeviceName::task)
      .def_readwrite("type", &DeviceName::type)
      .def_readwrite("id", &DeviceName::id)
      .def_static("parse", &DeviceName::parse, py::arg("text"))
      .def_static("try_parse", &DeviceName::try_parse, py::arg("text"))
      .def_static("make", &DeviceName::make, py::arg("job"), py::arg("replica"), py::arg("task"),
                  py::arg("type"), py::arg("id"))
      .def("to_string", &DeviceName::to_string)
      .def("is_fully_specified", &DeviceName::is_fully_specified)
      .def("matches", &DeviceName::matches, py::arg("other"))
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__str__", &DeviceName::to_string)
      .def("__repr__",
           [](const DeviceName& d) { return "DeviceName.parse('" + d.to_string() + "')"; })
      .def(py::pickle(
          [](const DeviceName& d) { return py::make_tuple(d.to_string()); },
          [](const py::tuple& t) { return DeviceName::parse(t[0].cast<std::string>()); }));
}

void bind_reduce_op(py::module_& m) {
  py::enum_<ReduceOp>(m, "ReduceOp")
      .value("SUM", ReduceOp::kSum)
      .value("MEAN", ReduceOp::kMean)
      .value("MAX", ReduceOp::kMax)
      .value("MIN", ReduceOp::kMin)
      .value("PROD", ReduceOp::kProd);
  m.def("reduce_op_name", &reduce_op_name, py::arg("op"));
  m.def("reduce_op_from_name", &reduce_op_from_name, py::arg("name"));
}

// ---- byte counts as text (byte_size.h) -------------------------------------------------------

void bind_byte_size(py::module_& m) {
  m.def("format_bytes", &format_bytes, py::arg("bytes"),
        "A byte count for people: '512 B', '1.5 KiB', '20.0 GiB' (binary units, one decimal).");
  m.def("parse_byte_size", &parse_byte_size, py::arg("text"),
        "A byte count as the environment variables and the CLI take it: 4096, 64M, 16MiB, 2g "
        "(powers of 1024); None for anything else.");
}

// ---- the median (median.h) ------------------------------------------------------------------

void bind_median(py::module_& m) {
  m.def("median", &median, py::arg("values"),
        "The median of a sample: the middle value of an odd count, the mean of the two middle "
        "values of an even one (numpy.median's); NaN when any value is NaN; no values raise "
        "ValueError.");
}

// ---- host memory (host_memory.h) ------------------------------------------------------------

void bind_host_memory(py::module_& m) {
  m.attr("DEFAULT_PER_PROCESS_MEMORY_FRACTION") = kDefaultPerProcessMemoryFraction;
  m.def("host_available_memory", &host_available_memory,
        "Bytes the host can still give this process (MemAvailable, lowered to the cgroup's "
        "headroom); -1 when unknown.");
  m.def("host_memory_limit", &host_memory_limit,
        "The process-wide limit on the bytes every tensor's storage holds (docs/memory.md).");
  m.def("set_host_memory_limit", &set_host_memory_limit, py::arg("bytes"),
        "Sets host_memory_limit(); a larger request then raises ResourceExhaustedError.");
  m.def(
      "host_memory_stats", [] { return memory_stats_dict(host_memory_stats()); },
      "A dict: live_bytes, peak_bytes, total_allocated_bytes, num_allocations, limit_bytes, "
      "cached_bytes of the host allocator.");
  m.def("reset_host_peak_memory", &reset_host_peak_memory);
}

// ---- the BLAS and intra-op threads (blas.h, parallel.h) -------------------------------------

void bind_blas_and_threads(py::module_& m) {
  py::class_<BlasInfo>(m, "BlasInfo", "The BLAS under the matmuls and the kernel set it runs.")
      .def_readonly("library", &BlasInfo::library)
      .def_readonly("config", &BlasInfo::config)
      .def_readonly("core", &BlasInfo::core)
      .def_readonly("library_core", &BlasInfo::library_core)
      .def_readonly("cpu_isa", &BlasInfo::cpu_isa)
      .def_readonly("chosen_by_tessel", &BlasInfo::chosen_by_tessel)
      .def_readonly("user_forced", &BlasInfo::user_forced)
      .def_readonly("path", &BlasInfo::path)
      .def_readonly("not_mkl", &BlasInfo::not_mkl)
      .def_readonly("bf16_gemm", &BlasInfo::bf16_gemm)
      .def_readonly("f16_gemm", &BlasInfo::f16_gemm)
      .def("to_string", &BlasInfo::to_string)
      .def("__repr__", &BlasInfo::to_string);
  m.def("blas_info", &blas_info, py::return_value_policy::reference,
        "The BLAS, its version and the kernel set it runs on this CPU (after tessel's check).");
  m.def("machine_cores", &machine_cores, "CPUs this process may run on.");
  m.def("intra_op_threads", &intra_op_threads,
        "Threads one op of a CPU device may use now: the cores shared by the CPU devices alive.");
  m.def("set_intra_op_threads", &set_intra_op_threads, py::arg("threads"),
        "Fixes intra_op_threads() (>= 1); 0 restores the automatic share.");
  py::enum_<MatmulPrecision>(m, "MatmulPrecision",
                             "float32 matmuls on GPUs: HIGHEST strict f32, HIGH TF32 tensor cores.")
      .value("HIGHEST", MatmulPrecision::kHighest)
      .value("HIGH", MatmulPrecision::kHigh);
  m.def("matmul_precision", &matmul_precision,
        "The float32 matmul precision (default HIGH, or TESSEL_MATMUL_PRECISION).");
  m.def("set_matmul_precision", &set_matmul_precision, py::arg("precision"));
  m.def("matmul_precision_name", &matmul_precision_name, py::arg("precision"));
  m.def("matmul_precision_from_name", &matmul_precision_from_name, py::arg("name"));
  m.def("enable_tensor_float_32_execution", &enable_tensor_float_32_execution,
        py::arg("enabled"), "TF's name: True is MatmulPrecision.HIGH, False HIGHEST.");
  m.def("tensor_float_32_execution_enabled", &tensor_float_32_execution_enabled);
}

// crc32c of bytes-like objects (bytes, bytearray, memoryview, numpy arrays): their buffer.
void bind_crc32c(py::module_& m) {
  m.def(
      "crc32c",
      [](const py::buffer& data) {
        const py::buffer_info b = data.request();
        return crc32c(b.ptr, static_cast<size_t>(b.size * b.itemsize));
      },
      py::arg("data"));
  m.def("crc32c_combine", &crc32c_combine, py::arg("crc_a"), py::arg("crc_b"), py::arg("size_b"));
}

}  // namespace

py::dict memory_stats_dict(const MemoryStats& s) {
  py::dict d;
  d["live_bytes"] = s.live_bytes;
  d["peak_bytes"] = s.peak_bytes;
  d["total_allocated_bytes"] = s.total_allocated_bytes;
  d["num_allocations"] = s.num_allocations;
  d["limit_bytes"] = s.limit_bytes;
  d["cached_bytes"] = s.cached_bytes;
  return d;
}

void bind_core(py::module_& m) {
  bind_errors(m);
  bind_dtypes(m);
  bind_tensor(m);
  bind_device_name(m);
  bind_reduce_op(m);
  bind_byte_size(m);
  bind_median(m);
  bind_host_memory(m);
  bind_blas_and_threads(m);
  bind_crc32c(m);
}

}  // namespace tessel::python
