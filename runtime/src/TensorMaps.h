//===- TensorMaps.h - TMA tensor maps the runtime encodes at launch -*- C++ -*-===//
//
// A bundle's `tensor_map` manifest lines say how to compute the TMA tensor
// maps of its kernel from the launch's arguments (docs/bundle-format.md,
// "tensor_map"). At each launch the runtime evaluates them, decides whether
// each view allows TMA (bit i of the flags argument), encodes the usable ones
// (cuTensorMapEncodeTiled on a GPU, the emulator's encoder for emu-sm_XY
// bundles) and passes them as kernel parameters, once per launch instead of
// once per program.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_TENSORMAPS_H
#define KILN_RUNTIME_SRC_TENSORMAPS_H

#include "kiln/runtime.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

struct Manifest;

/// One token of a postfix expression over the scalar arguments.
struct MapToken {
  enum Op : uint8_t {
    Const, Arg, Add, Sub, Mul, SDiv, UDiv, SRem, URem, SMax, SMin, UMax, UMin
  } op;
  int64_t value; // Const: the number; Arg: the argument's index
};

struct TensorMapSpec {
  /// plain: the view's dimensions reversed, the tile as the box; core: the
  /// columns split into 8-element chunks (wgmma's no-swizzle layout);
  /// swizzled: boxes of 128-byte rows (64 16-bit columns, 128 fp8 bytes)
  /// in the 128-byte swizzle.
  enum Kind : uint8_t { Plain, Core, Swizzled } kind = Plain;
  uint32_t elemBytes = 0; // 1, 2, 4 or 8
  uint32_t ptrArg = 0;    // the view's base: a pointer argument
  uint32_t rank = 0;      // the view's and the tile's (2 to 5)
  uint32_t rows = 0, cols = 0; // the tile's last two dimensions
  /// The view's sizes and strides (in elements), outermost first.
  std::vector<std::vector<MapToken>> sizes, strides;
};

/// cuTensorMapEncodeTiled's signature (CUresult: 0 on success).
using TensorMapEncoder = int (*)(void *map, int dataType, uint32_t rank,
                                 void *globalAddress, const uint64_t *globalDim,
                                 const uint64_t *globalStrides,
                                 const uint32_t *boxDim,
                                 const uint32_t *elementStrides, int interleave,
                                 int swizzle, int l2Promotion, int oobFill);

/// A CUtensorMap's storage.
struct alignas(64) TensorMapBytes {
  uint8_t bytes[128];
};

/// Parses manifest.tensorMapLines into manifest.tensorMaps and checks them
/// against the arguments: KILN_ERROR_BAD_BUNDLE naming the bundle, the map
/// and what is wrong. At most 32 maps.
kiln_status checkTensorMaps(Manifest &manifest);

/// Encodes `manifest`'s maps for the launch arguments `args` with `encode`
/// (named `encoderName` in errors): out[i] for map i, bit i of `flags` set
/// when the view allows TMA (then out[i] is encoded; else zeroed).
kiln_status encodeTensorMaps(const Manifest &manifest, const kiln_arg *args,
                             TensorMapEncoder encode, const char *encoderName,
                             TensorMapBytes *out, uint32_t &flags);

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_TENSORMAPS_H
