//===- CodeLoader.h - Load a bundle's ELF code section ----------*- C++ -*-===//
//
// Turns the code section of a bundle (an x86-64 ELF shared object held in
// memory) into a loaded library and resolves the kernel entry symbol.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_CODELOADER_H
#define KILN_RUNTIME_SRC_CODELOADER_H

#include "kiln/runtime.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::rt {

/// The CPU kernel ABI (docs/bundle-format.md, "Kernel ABI").
using KernelFn = void (*)(void *const *args, int32_t pidX, int32_t pidY,
                          int32_t pidZ, int32_t gridX, int32_t gridY,
                          int32_t gridZ);

struct LoadedCode {
  void *handle = nullptr;
  KernelFn entry = nullptr;
  /// emu-sm_XY bundles: the emulator's tensor-map encoder
  /// (kiln_emu_tensormap_encode, TensorMaps.h's TensorMapEncoder), or null.
  void *tensorMapEncoder = nullptr;
  /// The code has kiln.assert: its kiln_assert_hook points at the runtime's
  /// kilnAssertHook (DeviceAssert.h), and launches run programs guarded.
  bool hasAsserts = false;
  /// The manifest the code was compiled for (its exported, NUL-terminated
  /// kiln_manifest), or null for code from compilers that did not embed it.
  /// Points into the loaded library.
  const char *embeddedManifest = nullptr;
};

/// Checks that `code` is an x86-64 ELF shared object, loads it and looks up
/// `entrySymbol`.
kiln_status loadElfCode(const uint8_t *code, size_t size,
                        const std::string &entrySymbol, LoadedCode &out);

/// Unloads what loadElfCode loaded. Safe on a default-constructed value.
void unloadCode(LoadedCode &code);

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_CODELOADER_H
