// byteps._core.dlpack_view: reads a DLPack capsule for byteps.dlpack (python/byteps/dlpack.py).
//
// The structs below are the DLPack ABI of the spec, v0.8 (dlpack.h's DLDevice, DLDataType,
// DLTensor and DLManagedTensor), written here from the spec's field list: the layout is the ABI,
// so every producer (NumPy, PyTorch, CuPy, JAX, TensorFlow...) fills exactly these fields.
//
// The protocol: a producer's __dlpack__() returns a PyCapsule named "dltensor" holding a
// DLManagedTensor*. The consumer takes ownership by renaming the capsule "used_dltensor" (the
// producer's capsule destructor then leaves it alone) and must call the tensor's deleter once it
// no longer needs the memory. dlpack_view does both: it renames the capsule and returns an owner
// object whose destruction calls the deleter, exactly once. Pure reads: no GIL release.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "byteps/c_api.h"

namespace py = pybind11;

namespace {

struct DLDevice {
  int32_t device_type;  // DLDeviceType: kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, ...
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;  // DLDataTypeCode: kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;    // ndim entries
  int64_t* strides;  // ndim entries, in elements; NULL: compact row-major
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

// Owns a consumed DLManagedTensor: its destruction (or release()) calls the producer's deleter once.
class DLPackOwner {
 public:
  explicit DLPackOwner(DLManagedTensor* tensor) : tensor_(tensor) {}
  DLPackOwner(const DLPackOwner&) = delete;
  DLPackOwner& operator=(const DLPackOwner&) = delete;
  ~DLPackOwner() { Release(); }

  void Release() {
    DLManagedTensor* t = tensor_;
    tensor_ = nullptr;
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
  bool Alive() const { return tensor_ != nullptr; }

 private:
  DLManagedTensor* tensor_;
};

// The core's dtype code for a DLPack dtype, or -1.
int CoreDtype(const DLDataType& t) {
  if (t.lanes != 1) return -1;
  switch (t.code) {
    case 0:  // kDLInt
      if (t.bits == 8) return BYTEPS_INT8;
      if (t.bits == 16) return BYTEPS_INT16;
      if (t.bits == 32) return BYTEPS_INT32;
      if (t.bits == 64) return BYTEPS_INT64;
      return -1;
    case 1:  // kDLUInt
      return t.bits == 8 ? BYTEPS_UINT8 : -1;
    case 2:  // kDLFloat
      if (t.bits == 16) return BYTEPS_FLOAT16;
      if (t.bits == 32) return BYTEPS_FLOAT32;
      if (t.bits == 64) return BYTEPS_FLOAT64;
      return -1;
    case 4:  // kDLBfloat
      return t.bits == 16 ? BYTEPS_BFLOAT16 : -1;
    case 6:  // kDLBool (DLPack 0.8), one byte per value
      return t.bits == 8 ? BYTEPS_BOOL : -1;
    default:
      return -1;
  }
}

// Row-major (C) order: strides absent, or each equal to the product of the later extents,
// ignoring dimensions of extent 1 (their stride is never used); an empty tensor always is.
bool CContiguous(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) return true;
  }
  int64_t expected = 1;
  for (int32_t i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

py::tuple View(const py::capsule& capsule) {
  PyObject* cap = capsule.ptr();
  const char* name = PyCapsule_GetName(cap);
  if (name != nullptr && std::string(name) == kUsedCapsuleName) {
    throw py::value_error("capsule already consumed: this DLPack capsule (\"used_dltensor\") was handed to a "
                          "consumer before; call x.__dlpack__() again for a new one");
  }
  if (name == nullptr || std::string(name) != kCapsuleName) {
    throw py::type_error(std::string("not a DLPack capsule: its name is ") +
                         (name == nullptr ? "NULL" : "\"" + std::string(name) + "\"") + ", not \"dltensor\"");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kCapsuleName));
  if (managed == nullptr) throw py::error_already_set();
  const DLTensor& t = managed->dl_tensor;
  if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr)) {
    throw py::value_error("malformed DLPack tensor: ndim " + std::to_string(t.ndim) + " without a shape");
  }
  // Ownership moves to the owner object from here on (renamed first: should anything below throw,
  // the owner's destructor still calls the deleter, once).
  if (PyCapsule_SetName(cap, kUsedCapsuleName) != 0) throw py::error_already_set();
  py::object owner = py::cast(new DLPackOwner(managed), py::return_value_policy::take_ownership);

  py::tuple shape(t.ndim);
  int64_t count = 1;
  for (int32_t i = 0; i < t.ndim; ++i) {
    shape[i] = py::int_(t.shape[i]);
    count *= t.shape[i];
  }
  const int64_t item_bits = static_cast<int64_t>(t.dtype.bits) * t.dtype.lanes;
  const int64_t nbytes = count * item_bits / 8;
  const uintptr_t data = reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(t.byte_offset);
  return py::make_tuple(owner, data, CoreDtype(t.dtype), py::make_tuple(t.dtype.code, t.dtype.bits, t.dtype.lanes),
                        shape, CContiguous(t), t.device.device_type, t.device.device_id, nbytes);
}

}  // namespace

void RegisterDLPack(py::module_& m) {
  py::class_<DLPackOwner>(m, "DLPackOwner",
                          "A consumed DLPack tensor: its producer's deleter runs when this object is "
                          "destroyed or release() is called, exactly once.")
      .def("release", &DLPackOwner::Release)
      .def_property_readonly("alive", &DLPackOwner::Alive);
  m.def("dlpack_view", &View, py::arg("capsule"),
        "Consumes a DLPack capsule (renamed \"used_dltensor\"); returns (owner, data pointer, the core's dtype "
        "code or -1, (DLPack code, bits, lanes), shape, C-contiguous, DLPack device type, device id, bytes). "
        "Keep owner alive while the memory is used.");
}
