//===- GPUChips.h - The NVIDIA architectures kiln compiles for --*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// One table, read by the target resolution (which names are GPU targets),
// the GPU lowering (shared-memory limits) and the NVPTX back end (the PTX
// ISA version to declare). Header-only: the conversion library and the
// compiler both include it without depending on each other.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TARGET_GPUCHIPS_H
#define KILN_TARGET_GPUCHIPS_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace kiln {

struct GPUChip {
  const char *name;
  /// The PTX ISA version the module declares (.version): the lowest that
  /// LLVM's NVPTX back end accepts for the chip (so the oldest driver that
  /// knows the chip can JIT it), 8.3 on sm_90a for tensormap.replace.
  unsigned ptxVersion;
  /// Largest dynamic shared memory per block (opt-in), and per SM (1 KiB of
  /// it is reserved per resident block), in bytes (CUDA C Programming
  /// Guide, compute capabilities table).
  int64_t maxSharedPerBlock, sharedPerSM;
};

inline constexpr GPUChip kGPUChips[] = {
    {"sm_80", 70, 163 * 1024, 164 * 1024},  // A100
    {"sm_86", 71, 99 * 1024, 100 * 1024},   // RTX 30xx, A10, A40
    {"sm_87", 74, 163 * 1024, 164 * 1024},  // Jetson Orin
    {"sm_89", 78, 99 * 1024, 100 * 1024},   // L4, L40S, RTX 40xx
    {"sm_90", 78, 227 * 1024, 228 * 1024},  // H100, H200 (mma.sync)
    {"sm_90a", 83, 227 * 1024, 228 * 1024}, // H100, H200 (wgmma, TMA)
    {"sm_100", 86, 227 * 1024, 228 * 1024}, // B200 (mma.sync)
    {"sm_120", 87, 99 * 1024, 100 * 1024},  // RTX 50xx (mma.sync)
};

/// The chip named `name` (sm_80, sm_90a, ...), or null.
inline const GPUChip *findGPUChip(llvm::StringRef name) {
  for (const GPUChip &c : kGPUChips)
    if (name == c.name)
      return &c;
  return nullptr;
}

/// "sm_80, sm_86, ..., sm_120": for error messages.
inline std::string knownGPUChips() {
  std::string s;
  for (const GPUChip &c : kGPUChips)
    s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

} // namespace kiln

#endif // KILN_TARGET_GPUCHIPS_H
