//===- RuntimeBindings.cpp - Load and launch kiln bundles from Python ------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Needs only the Kiln runtime: this file is all of the runtime-only module
// (`kiln._kiln_runtime`) for machines that run precompiled bundles.
//
//===----------------------------------------------------------------------===//

#include "Bindings.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;
using kiln::python::PyKernel;

namespace {

// (Without forcecast: an int64 or float array is refused, never wrapped.)
using MaskArray = py::array_t<int32_t, py::array::c_style>;

/// kiln.ops' block-mask checks (python/kiln/ops.py, _check_mask), which the
/// attention kernel relies on, in one pass over the int32 arrays: [rows,
/// nqb] counts and [rows, nqb, maxb] lists. The result: None, or what the
/// first bad entry is: "kv_num" / "full_num", a count outside [0, maxb];
/// "kv_idx" / "full_idx", a listed block outside [0, key_blocks);
/// "full_end", a listed full block ending past seq_kv; "twice", a key block
/// listed twice for one query block (in both lists, or twice in one: the
/// kernel would add its keys to the softmax twice). In numpy these were
/// about 20 array operations, 35 us of each attention call.
py::object checkBlockMask(MaskArray kvNum, MaskArray kvIdx, MaskArray fullNum,
                          MaskArray fullIdx, int64_t rows, int64_t nqb, int64_t maxb,
                          int64_t keyBlocks, int64_t blockKv, int64_t seqKv) {
  // (Products checked: an overflowed one matched empty arrays, and the
  // loops then read past them.)
  int64_t lists = 0, entries = 0;
  if (rows < 0 || nqb < 0 || maxb < 0 || __builtin_mul_overflow(rows, nqb, &lists) ||
      __builtin_mul_overflow(lists, maxb, &entries) || kvNum.size() != lists ||
      fullNum.size() != lists || kvIdx.size() != entries || fullIdx.size() != entries)
    throw py::value_error("check_block_mask: the arrays do not have the shapes given");
  // (A list holds up to maxb blocks: every key block must fit one.)
  if (keyBlocks < 0 || keyBlocks > maxb)
    throw py::value_error("check_block_mask: key_blocks must be in [0, maxb]");
  const int32_t *num[2] = {kvNum.data(), fullNum.data()};
  const int32_t *idx[2] = {kvIdx.data(), fullIdx.data()};
  const char *numName[2] = {"kv_num", "full_num"}, *idxName[2] = {"kv_idx", "full_idx"};
  for (int kind = 0; kind < 2; ++kind)
    for (int64_t l = 0; l < lists; ++l) {
      int32_t n = num[kind][l];
      if (n < 0 || n > maxb)
        return py::str(numName[kind]);
      for (const int32_t *at = idx[kind] + l * maxb, *end = at + n; at != end; ++at) {
        if (*at < 0 || *at >= keyBlocks)
          return py::str(idxName[kind]);
        // Full blocks skip the key mask: one cut by the sequence end would
        // read keys past it.
        if (kind == 1 && (int64_t(*at) + 1) * blockKv > seqKv)
          return py::str("full_end");
      }
    }
  // Every listed block is now inside [0, keyBlocks), and keyBlocks <= maxb
  // (checked above: the marks are no larger than one list): marked per
  // list, the marks cleared after it. (Sorting each list instead took
  // 29 us for a decoding step's 32 lists of 64.)
  std::vector<uint8_t> listed(keyBlocks);
  for (int64_t l = 0; l < lists; ++l) {
    bool twice = false;
    for (int kind = 0; kind < 2; ++kind)
      for (const int32_t *at = idx[kind] + l * maxb, *end = at + num[kind][l]; at != end; ++at)
        twice |= listed[*at]++ != 0;
    for (int kind = 0; kind < 2; ++kind)
      for (const int32_t *at = idx[kind] + l * maxb, *end = at + num[kind][l]; at != end; ++at)
        listed[*at] = 0;
    if (twice)
      return py::str("twice");
  }
  return py::none();
}

/// Whether each `group` consecutive rows (a GQA group's query heads) of a
/// block mask's arrays ([rows, ...], C-contiguous) are the same (kiln.ops'
/// _packs_gqa).
bool groupsShareRows(std::vector<MaskArray> arrays, int64_t group) {
  if (group < 1)
    throw py::value_error("groups_share_rows: the group must be positive");
  for (MaskArray &a : arrays) {
    if (a.ndim() < 1 || a.shape(0) % group)
      return false;
    const int64_t row = a.shape(0) ? a.size() / a.shape(0) : 0;
    const int32_t *d = a.data();
    for (int64_t r = 0; r < a.shape(0); ++r)
      if (r % group && std::memcmp(d + r * row, d + (r - r % group) * row, row * 4))
        return false;
  }
  return true;
}

struct LaunchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// A failed kiln.assert (kl.device_assert) in a CPU or emulated GPU launch.
struct DeviceAssertError : LaunchError {
  using LaunchError::LaunchError;
};
/// A bundle the runtime refuses to load (corrupt, for another target, code
/// it cannot load): a LaunchError too, as it was before it had a name.
struct BundleError : LaunchError {
  using LaunchError::LaunchError;
};

[[noreturn]] void raise(kiln_status st, bool loading = false) {
  std::string msg = std::string(kiln_status_code_name(kiln_status_code_of(st))) +
                    ": " + kiln_status_message(st);
  kiln_status_code code = kiln_status_code_of(st);
  kiln_status_free(st);
  if (code == KILN_ERROR_INVALID_ARGUMENT)
    throw py::value_error(msg);
  if (loading)
    throw BundleError(msg);
  if (code == KILN_ERROR_ASSERT)
    throw DeviceAssertError(msg);
  throw LaunchError(msg);
}

std::shared_ptr<kiln_runtime> makeRuntime(int threads) {
  kiln_runtime *rt = nullptr;
  if (kiln_status st = kiln_runtime_create(threads, &rt))
    raise(st);
  return std::shared_ptr<kiln_runtime>(rt, kiln_runtime_destroy);
}

std::shared_ptr<kiln_runtime> &defaultRuntime() {
  static std::shared_ptr<kiln_runtime> rt = makeRuntime(0);
  return rt;
}

/// Converts the Python arguments by the kernel's signature and launches;
/// with `wait` false a GPU kernel is only queued (kiln_launch_async), and
/// with a `stream` (a CUstream's address) it goes to that stream
/// (kiln_launch_on_stream).
void launch(PyKernel &k, const std::vector<py::object> &args,
            const std::vector<int64_t> &grid, bool wait,
            std::optional<uintptr_t> stream) {
  size_t n = kiln_kernel_num_args(k.handle);
  if (args.size() != n)
    throw py::type_error("kernel '" + std::string(kiln_kernel_name(k.handle)) +
                         "' takes " + std::to_string(n) + " arguments, got " +
                         std::to_string(args.size()));
  if (grid.empty() || grid.size() > 3)
    throw py::value_error("the launch grid must have 1 to 3 dimensions, got " +
                          std::to_string(grid.size()));
  std::vector<kiln_arg> packed(n);
  for (size_t i = 0; i < n; ++i) {
    kiln_arg_info info;
    if (kiln_status st = kiln_kernel_arg_info(k.handle, i, &info))
      raise(st);
    kiln_arg &a = packed[i];
    a.kind = info.kind;
    a.dtype = info.dtype;
    const py::object &o = args[i];
    try {
      if (info.kind == KILN_ARG_PTR) {
        a.value.ptr = reinterpret_cast<void *>(o.cast<uintptr_t>());
        continue;
      }
      switch (info.dtype) {
      case KILN_DTYPE_F32:
        a.value.f32 = o.cast<float>();
        break;
      case KILN_DTYPE_F64:
        a.value.f64 = o.cast<double>();
        break;
      case KILN_DTYPE_I8:
        a.value.i8 = o.cast<int8_t>();
        break;
      case KILN_DTYPE_I16:
        a.value.i16 = o.cast<int16_t>();
        break;
      case KILN_DTYPE_I32:
        a.value.i32 = o.cast<int32_t>();
        break;
      case KILN_DTYPE_I64:
        a.value.i64 = o.cast<int64_t>();
        break;
      case KILN_DTYPE_U8:
      case KILN_DTYPE_I1:
        a.value.u8 = o.cast<uint8_t>();
        break;
      default:
        a.value.bits16 = o.cast<uint16_t>();
        break;
      }
    } catch (const py::cast_error &) {
      // (An int of the wrong range names its value: "got <class 'int'>"
      // said nothing about 2^31 for an i32.)
      bool outOfRange = info.kind != KILN_ARG_PTR && py::isinstance<py::int_>(o) &&
                        !py::isinstance<py::bool_>(o);
      throw py::type_error("argument " + std::to_string(i) + " ('" +
                           info.name + "') of kernel '" +
                           kiln_kernel_name(k.handle) + "' must be " +
                           (info.kind == KILN_ARG_PTR
                                ? std::string("a pointer (array)")
                                : std::string("a scalar ") +
                                      kiln_dtype_name(info.dtype)) +
                           ", got " +
                           (outOfRange ? std::string(py::str(o)) + ", outside its range"
                                       : std::string(py::str(o.get_type()))));
    }
  }
  int64_t g[3] = {1, 1, 1};
  for (size_t i = 0; i < grid.size(); ++i)
    g[i] = grid[i];
  kiln_status st;
  {
    py::gil_scoped_release release;
    if (stream)
      st = kiln_launch_on_stream(k.runtime, k.handle, packed.data(),
                                 packed.size(), g,
                                 reinterpret_cast<void *>(*stream), wait);
    else
      st = wait ? kiln_launch(k.runtime, k.handle, packed.data(), packed.size(), g)
                : kiln_launch_async(k.runtime, k.handle, packed.data(),
                                    packed.size(), g);
  }
  if (st)
    raise(st);
}

py::list signature(PyKernel &k) {
  py::list out;
  for (size_t i = 0; i < kiln_kernel_num_args(k.handle); ++i) {
    kiln_arg_info info;
    if (kiln_status st = kiln_kernel_arg_info(k.handle, i, &info))
      raise(st);
    out.append(py::make_tuple(info.name,
                              info.kind == KILN_ARG_PTR ? "ptr" : "scalar",
                              kiln_dtype_name(info.dtype)));
  }
  return out;
}

PyKernel loadBytes(const std::string &bytes, int threads) {
  kiln_kernel *h = nullptr;
  if (kiln_status st = kiln_bundle_load_memory(bytes.data(), bytes.size(), &h))
    raise(st, /*loading=*/true);
  PyKernel k;
  k.keepAlive = std::shared_ptr<kiln_kernel>(h, kiln_kernel_destroy);
  k.handle = h;
  k.ownedRuntime = threads ? makeRuntime(threads) : defaultRuntime();
  k.runtime = k.ownedRuntime.get();
  return k;
}

} // namespace

void kiln::python::bindRuntime(py::module &m) {
  // (Module-local: the compiler extension and the runtime-only one both
  // define them, and each raises its own.)
  auto &launchError = py::register_local_exception<LaunchError>(
      m, "LaunchError", PyExc_RuntimeError);
  py::register_local_exception<BundleError>(m, "BundleError", launchError.ptr());
  py::register_local_exception<DeviceAssertError>(m, "DeviceAssertError",
                                                  launchError.ptr());
  py::class_<PyKernel>(m, "Kernel", py::module_local())
      .def("launch", &launch, py::arg("args"), py::arg("grid"),
           py::arg("wait") = true, py::arg("stream") = py::none())
      .def(
          "synchronize",
          [](PyKernel &k) {
            kiln_status st;
            {
              py::gil_scoped_release release;
              st = kiln_synchronize(k.runtime);
            }
            if (st)
              raise(st);
          },
          "Waits for the GPU kernels launched with wait=False on this "
          "kernel's runtime (not those given a stream); raises LaunchError "
          "for an error they raised")
      .def_property_readonly("name",
                             [](PyKernel &k) { return kiln_kernel_name(k.handle); })
      .def_property_readonly("signature", &signature)
      // Per argument: True if the kernel may write through it, False if
      // not, None when the bundle does not say (kiln_kernel_arg_written).
      .def_property_readonly("written",
                             [](PyKernel &k) {
                               py::list out;
                               for (size_t i = 0;
                                    i < kiln_kernel_num_args(k.handle); ++i) {
                                 int w = kiln_kernel_arg_written(k.handle, i);
                                 out.append(w < 0 ? py::object(py::none())
                                                  : py::object(py::bool_(w)));
                               }
                               return out;
                             })
      .def_property_readonly(
          "is_gpu", [](PyKernel &k) { return kiln_kernel_is_gpu(k.handle) != 0; })
      .def_property_readonly(
          "target", [](PyKernel &k) { return kiln_kernel_target(k.handle); })
      .def_property_readonly(
          "grid_rank", [](PyKernel &k) { return kiln_kernel_grid_rank(k.handle); })
      .def_property_readonly(
          "scratch_bytes",
          [](PyKernel &k) { return kiln_kernel_scratch_bytes(k.handle); })
      .def_property_readonly("features", [](PyKernel &k) {
        std::vector<std::string> f;
        for (size_t i = 0; i < kiln_kernel_num_features(k.handle); ++i)
          f.push_back(kiln_kernel_feature(k.handle, i));
        return f;
      });
  m.def(
      "cuda_compute_capability",
      []() {
        int major = 0, minor = 0;
        if (kiln_status st = kiln_cuda_compute_capability(&major, &minor))
          raise(st);
        return py::make_tuple(major, minor);
      },
      "Compute capability (major, minor) of the CUDA device GPU bundles run "
      "on; raises LaunchError without a driver or a device");
  m.def(
      "load_bundle",
      [](const std::string &path, int threads) {
        kiln_kernel *h = nullptr;
        if (kiln_status st = kiln_bundle_load_file(path.c_str(), &h))
          raise(st, /*loading=*/true);
        PyKernel k;
        k.keepAlive = std::shared_ptr<kiln_kernel>(h, kiln_kernel_destroy);
        k.handle = h;
        k.ownedRuntime = threads ? makeRuntime(threads) : defaultRuntime();
        k.runtime = k.ownedRuntime.get();
        return k;
      },
      py::arg("path"), py::arg("num_threads") = 0,
      "Loads a kernel bundle (.kiln) written by kilnc or the JIT.");
  m.def(
      "load_bundle_bytes",
      [](py::bytes data, int threads) {
        return loadBytes(std::string(data), threads);
      },
      py::arg("data"), py::arg("num_threads") = 0);
  m.def("cpu_features", [] { return std::string(kiln_cpu_features_string()); });
  m.def(
      "cuda_device",
      [] {
        // (available, description): the device name and compute capability,
        // or why there is none (no driver, no device).
        char msg[512] = {0};
        if (!kiln_cuda_available(msg, sizeof(msg)))
          return py::make_tuple(false, std::string(msg));
        char name[256] = {0};
        int major = 0, minor = 0;
        if (kiln_status st = kiln_cuda_device_name(name, sizeof(name)))
          raise(st);
        if (kiln_status st = kiln_cuda_compute_capability(&major, &minor))
          raise(st);
        return py::make_tuple(true, std::string(name) + " (sm_" + std::to_string(major) +
                                        std::to_string(minor) + ")");
      },
      "Whether a CUDA device is usable by the runtime, and which.");
  m.def("runtime_version", [] { return std::string(kiln_runtime_version()); });
  m.def("check_block_mask", &checkBlockMask, py::arg("kv_num"), py::arg("kv_idx"),
        py::arg("full_num"), py::arg("full_idx"), py::arg("rows"), py::arg("nqb"),
        py::arg("maxb"), py::arg("key_blocks"), py::arg("block_kv"), py::arg("seq_kv"),
        "kiln.ops' checks of a host block mask's int32 arrays in one pass: None, "
        "or what is bad (kv_num, kv_idx, full_num, full_idx, full_end, twice).");
  m.def("groups_share_rows", &groupsShareRows, py::arg("arrays"), py::arg("group"),
        "Whether each `group` consecutive rows of every int32 array are the same.");
}
