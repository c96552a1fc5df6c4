// byteps._core: the pybind11 module over the C API. Plugins (byteps.numpy, byteps.torch) pass raw
// data pointers, sizes and dtype codes, so one build works with any framework version. Errors
// become byteps._core.BytePSError (a RuntimeError) or ValueError for invalid arguments (this
// process's own), carrying the core's message. The workers disagreeing on a tensor
// (BYTEPS_MISMATCH) is a BytePSError: every worker gets it alike, whatever its own arguments.
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "byteps/c_api.h"

namespace py = pybind11;

// python_dlpack.cc: dlpack_view and its owner type (byteps.dlpack).
void RegisterDLPack(py::module_& m);

namespace {

PyObject* g_error_type = nullptr;

[[noreturn]] void Raise() {
  std::string msg = byteps_last_error();
  int code = byteps_last_error_code();
  if (code == BYTEPS_INVALID_ARGUMENT) throw py::value_error(msg);
  PyErr_SetString(g_error_type, msg.c_str());
  throw py::error_already_set();
}

int Check(int rc) {
  if (rc < 0) Raise();
  return rc;
}

// Runs a C ABI call without Python's GIL: almost any of them can wait (the first call after
// byteps_lazy_init joins the job; Enqueue can wait for the tuner's agreement or a device group's
// start-up), and other Python threads must run meanwhile. Errors are raised once the GIL is back
// (the C API's last error is per thread, so it survives the switch).
template <typename F>
auto NoGil(F&& call) {
  py::gil_scoped_release nogil;
  return call();
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "byteps native core (C API bindings)";
  static py::exception<std::runtime_error> err(m, "BytePSError", PyExc_RuntimeError);
  g_error_type = err.ptr();

  m.def("init", [] { Check(NoGil([] { return byteps_init(); })); });
  m.def("shutdown", [] { Check(NoGil([] { return byteps_shutdown(); })); });
  m.def("lazy_init", [] { Check(NoGil([] { return byteps_lazy_init(); })); });
  m.def("suspend", [] { Check(NoGil([] { return byteps_suspend(); })); });
  m.def(
      "resume",
      [](int num_workers, int num_servers, int global_rank) {
        Check(NoGil([&] { return byteps_resume(num_workers, num_servers, global_rank); }));
      },
      py::arg("num_workers"), py::arg("num_servers"), py::arg("global_rank") = -1);
  m.def("get_pushpull_speed", [] {
    int64_t ms = 0;
    double mbps = 0;
    Check(NoGil([&] { return byteps_get_pushpull_speed(&ms, &mbps); }));
    return py::make_tuple(ms, mbps);
  });
  // Gradient codecs (byteps_codec_*): `data` any contiguous buffer (e.g. a NumPy array); results
  // are bytes. decompress with `add`: `acc` (count float32 values) plus the decoded part.
  m.def(
      "codec_compress",
      [](const std::string& params, const std::string& tensor, int dtype, py::buffer data, size_t count, uint64_t key,
         uint64_t round) {
        py::buffer_info in = data.request();
        const int64_t cap = byteps_codec_max_bytes(params.c_str(), tensor.c_str(), dtype, count);
        if (cap < 0) Raise();
        std::string out(static_cast<size_t>(cap), '\0');
        const int64_t n = byteps_codec_compress(params.c_str(), tensor.c_str(), dtype, in.ptr, count, key, round,
                                                out.data(), out.size());
        if (n < 0) Raise();
        out.resize(static_cast<size_t>(n));
        return py::bytes(out);
      },
      py::arg("params"), py::arg("tensor"), py::arg("dtype"), py::arg("data"), py::arg("count"), py::arg("key") = 0,
      py::arg("round") = 1);
  m.def(
      "codec_decompress",
      [](const std::string& params, const std::string& tensor, int dtype, py::buffer payload, size_t count,
         size_t element_size, py::object acc) {
        py::buffer_info in = payload.request();
        const bool add = !acc.is_none();
        std::string out;
        if (add) {
          py::buffer_info a = acc.cast<py::buffer>().request();
          out.assign(static_cast<const char*>(a.ptr), static_cast<size_t>(a.size * a.itemsize));
        } else {
          out.assign(count * element_size, '\0');
        }
        if (out.size() < count * (add ? sizeof(float) : element_size)) {
          throw py::value_error("codec_decompress: the accumulator is smaller than count float32 values");
        }
        Check(byteps_codec_decompress(params.c_str(), tensor.c_str(), dtype, in.ptr,
                                      static_cast<size_t>(in.size * in.itemsize), count, out.data(), add ? 1 : 0));
        return py::bytes(out);
      },
      py::arg("params"), py::arg("tensor"), py::arg("dtype"), py::arg("payload"), py::arg("count"),
      py::arg("element_size"), py::arg("acc") = py::none());
  // Gradient compression in a job (c_api.h): error feedback's learning rate, and per-name parameters
  // ({"byteps_compressor_type": "topk", "byteps_compressor_k": 0.01, ...}; values are turned into
  // strings: str(), bools as "true"/"false").
  m.def(
      "set_learning_rate", [](double lr) { Check(byteps_set_learning_rate(lr)); }, py::arg("lr"));
  m.def(
      "declare_tensor_params",
      [](const std::string& name, const py::dict& params) {
        std::vector<std::string> keys, values;
        for (const auto& [k, v] : params) {
          keys.push_back(py::str(k));
          values.push_back(py::isinstance<py::bool_>(v) ? (v.cast<bool>() ? "true" : "false")
                                                        : std::string(py::str(v)));
        }
        std::vector<const char*> kp, vp;
        for (size_t i = 0; i < keys.size(); ++i) {
          kp.push_back(keys[i].c_str());
          vp.push_back(values[i].c_str());
        }
        Check(byteps_declare_tensor_params(name.c_str(), static_cast<int>(keys.size()), kp.data(), vp.data()));
      },
      py::arg("name"), py::arg("params"));
  m.def("is_initialized", [] { return byteps_is_initialized() != 0; });
  m.def("rank", [] { return Check(NoGil([] { return byteps_rank(); })); });
  m.def("size", [] { return Check(NoGil([] { return byteps_size(); })); });
  m.def("local_rank", [] { return Check(NoGil([] { return byteps_local_rank(); })); });
  m.def("local_size", [] { return Check(NoGil([] { return byteps_local_size(); })); });
  m.def(
      "declare", [](const std::string& name) { return Check(NoGil([&] { return byteps_declare(name.c_str()); })); },
      py::arg("name"));
  m.def(
      "declare_tensor",
      [](const std::string& name, size_t nbytes, int dtype) {
        return Check(NoGil([&] { return byteps_declare_tensor(name.c_str(), nbytes, dtype); }));
      },
      py::arg("name"), py::arg("nbytes"), py::arg("dtype"));
  m.def(
      "push_pull_async",
      [](const std::string& name, uintptr_t input, uintptr_t output, size_t nbytes, int dtype, bool average,
         int priority, int device_kind, int device_index, uintptr_t stream) {
        byteps_handle_t h = NoGil([&] {
          return byteps_push_pull_async_on(name.c_str(), reinterpret_cast<const void*>(input),
                                           reinterpret_cast<void*>(output), nbytes, dtype, average ? 1 : 0, priority,
                                           device_kind, device_index, reinterpret_cast<void*>(stream));
        });
        if (h < 0) Raise();
        return h;
      },
      py::arg("name"), py::arg("input"), py::arg("output"), py::arg("nbytes"), py::arg("dtype"),
      py::arg("average"), py::arg("priority") = 0, py::arg("device_kind") = 0, py::arg("device_index") = 0,
      py::arg("stream") = 0);
  m.def(
      "reduce_async",
      [](const std::string& name, uintptr_t input, uintptr_t output, size_t nbytes, int dtype, int op, bool average,
         const std::string& attrs, int priority, int device_kind, int device_index, uintptr_t stream) {
        byteps_handle_t h = NoGil([&] {
          return byteps_reduce_async_on(name.c_str(), reinterpret_cast<const void*>(input),
                                        reinterpret_cast<void*>(output), nbytes, dtype, op, average ? 1 : 0,
                                        attrs.c_str(), priority, device_kind, device_index,
                                        reinterpret_cast<void*>(stream));
        });
        if (h < 0) Raise();
        return h;
      },
      py::arg("name"), py::arg("input"), py::arg("output"), py::arg("nbytes"), py::arg("dtype"), py::arg("op"),
      py::arg("average"), py::arg("attrs") = "", py::arg("priority") = 0, py::arg("device_kind") = 0,
      py::arg("device_index") = 0, py::arg("stream") = 0);
  m.attr("OP_SUM") = static_cast<int>(BYTEPS_OP_SUM);
  m.attr("OP_MIN") = static_cast<int>(BYTEPS_OP_MIN);
  m.attr("OP_MAX") = static_cast<int>(BYTEPS_OP_MAX);
  m.attr("OP_PRODUCT") = static_cast<int>(BYTEPS_OP_PRODUCT);
  m.attr("OP_ADASUM") = static_cast<int>(BYTEPS_OP_ADASUM);
  m.def("device_built", [](int kind) { return byteps_device_built(kind) != 0; });
  m.attr("DEVICE_CPU") = static_cast<int>(BYTEPS_DEVICE_CPU);
  m.attr("DEVICE_CUDA") = static_cast<int>(BYTEPS_DEVICE_CUDA);
  m.attr("DEVICE_FAKE") = static_cast<int>(BYTEPS_DEVICE_FAKE);
  m.def(
      "allgather_async",
      [](const std::string& name, uintptr_t input, size_t slice_bytes, uintptr_t output, size_t total_bytes,
         size_t slice_offset, int dtype, int priority, int device_kind, int device_index, uintptr_t stream,
         const std::string& attrs) {
        byteps_handle_t h = NoGil([&] {
          return byteps_allgather_async_ex(name.c_str(), reinterpret_cast<const void*>(input), slice_bytes,
                                           reinterpret_cast<void*>(output), total_bytes, slice_offset, dtype, priority,
                                           device_kind, device_index, reinterpret_cast<void*>(stream), attrs.c_str());
        });
        if (h < 0) Raise();
        return h;
      },
      py::arg("name"), py::arg("input"), py::arg("slice_bytes"), py::arg("output"), py::arg("total_bytes"),
      py::arg("slice_offset"), py::arg("dtype"), py::arg("priority") = 0, py::arg("device_kind") = 0,
      py::arg("device_index") = 0, py::arg("stream") = 0, py::arg("attrs") = "");
  m.def(
      "broadcast_async",
      [](const std::string& name, uintptr_t buffer, size_t nbytes, int dtype, int root_rank, int priority,
         int device_kind, int device_index, uintptr_t stream, const std::string& attrs) {
        byteps_handle_t h = NoGil([&] {
          return byteps_broadcast_async_ex(name.c_str(), reinterpret_cast<void*>(buffer), nbytes, dtype, root_rank,
                                           priority, device_kind, device_index, reinterpret_cast<void*>(stream),
                                           attrs.c_str());
        });
        if (h < 0) Raise();
        return h;
      },
      py::arg("name"), py::arg("buffer"), py::arg("nbytes"), py::arg("dtype"), py::arg("root_rank"),
      py::arg("priority") = 0, py::arg("device_kind") = 0, py::arg("device_index") = 0, py::arg("stream") = 0,
      py::arg("attrs") = "");
  m.def("poll", [](int64_t h) { return Check(NoGil([&] { return byteps_poll(h); })) == 1; }, py::arg("handle"));
  m.def(
      "wait",
      [](int64_t h, double timeout) {
        Check(NoGil([&] { return byteps_wait(h, timeout); }));
      },
      py::arg("handle"), py::arg("timeout") = -1.0);
  m.def("release", [](int64_t h) { byteps_release(h); }, py::arg("handle"));
  m.def("join", [] { return Check(NoGil([] { return byteps_join(); })); });

  m.attr("FLOAT32") = static_cast<int>(BYTEPS_FLOAT32);
  m.attr("FLOAT64") = static_cast<int>(BYTEPS_FLOAT64);
  m.attr("FLOAT16") = static_cast<int>(BYTEPS_FLOAT16);
  m.attr("UINT8") = static_cast<int>(BYTEPS_UINT8);
  m.attr("INT32") = static_cast<int>(BYTEPS_INT32);
  m.attr("INT8") = static_cast<int>(BYTEPS_INT8);
  m.attr("INT64") = static_cast<int>(BYTEPS_INT64);
  m.attr("BFLOAT16") = static_cast<int>(BYTEPS_BFLOAT16);
  m.attr("INT16") = static_cast<int>(BYTEPS_INT16);
  m.attr("BOOL") = static_cast<int>(BYTEPS_BOOL);

  RegisterDLPack(m);

  m.attr("INVALID_ARGUMENT") = static_cast<int>(BYTEPS_INVALID_ARGUMENT);
  m.attr("MISMATCH") = static_cast<int>(BYTEPS_MISMATCH);
}
