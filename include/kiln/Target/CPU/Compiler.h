//===- Compiler.h - Compile kiln modules to x86-64 bundles ------*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The one compile path shared by kilnc and the JIT: kiln IR -> kiln-cpu-pipeline
// -> LLVM IR -> O3 -> object code -> ELF shared object -> bundle
// (docs/bundle-format.md).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TARGET_CPU_COMPILER_H
#define KILN_TARGET_CPU_COMPILER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace mlir {
class Diagnostic;
class DialectRegistry;
class MLIRContext;
} // namespace mlir

namespace kiln {

/// The compiler's version; part of every bundle manifest.
const char *compilerVersion();

/// The version plus a hash of the compiler's sources (computed at build
/// time): part of every disk-cache key, so that a rebuilt compiler never
/// reuses bundles an older build wrote, while every program built from the
/// same sources (kilnc, the JIT, Python) shares them.
const std::string &compilerFingerprint();

/// An x86-64 code generation target: what LLVM is told, and what the bundle
/// requires of the machine that runs it.
struct CPUTarget {
  std::string name;           // x86-64-avx512, x86-64-avx2, ...
  std::string cpu;            // LLVM CPU name
  std::string llvmFeatures;   // LLVM feature string
  unsigned vectorBits = 512;  // native vector width used for tiles
  std::vector<std::string> requiredFeatures; // runtime feature names
  // Set for `emu-sm_XY` targets: the GPU architecture whose lowering runs on
  // this CPU under the SIMT emulator (a testing target).
  std::string emulatedGPU;
};

/// Resolves a target name: `host` (the best variant this CPU runs),
/// `x86-64` (same as host), `x86-64-avx512-bf16` (AVX-512 with
/// AVX512-BF16: bf16 dots on vdpbf16ps), `x86-64-avx512`, `x86-64-avx2`,
/// `x86-64-sse` (baseline x86-64-v2). GPU targets (`sm_80`, `sm_90a`, ...)
/// resolve to a descriptor with the architecture as `cpu` and no features.
/// An empty name is an error.
llvm::Expected<CPUTarget> resolveCPUTarget(llvm::StringRef name);

/// One kernel argument as the runtime sees it.
struct KernelArg {
  std::string name;
  std::string kind;  // ptr | scalar
  std::string dtype; // f32, i64, ...
  /// A pointer the kernel may write through (a store, atomic add or scatter
  /// into a view of it, or a use the analysis does not follow). False for
  /// scalars and for pointers only read.
  bool written = false;
};

/// What a launcher needs to know about a kernel.
struct KernelInfo {
  std::string name;
  unsigned gridRank = 1;
  std::vector<KernelArg> args;
};

/// The manifest's `writes` line (with its newline): the pointer arguments
/// `kernel` may write through (docs/bundle-format.md, "Keys").
std::string writesLine(const KernelInfo &kernel);

/// What to produce. For GPU targets (`sm_80`, `sm_90a`, ...), Asm is PTX and
/// Obj a cubin (through ptxas); a bundle holds PTX, or a cubin with
/// CompileOptions::cubin.
enum class EmitKind { MLIR, LLVM, Asm, Obj, Bundle, CHeader };

/// Whether `target` names an NVIDIA GPU (`sm_XY` or `sm_XYa`).
bool isGPUTarget(llvm::StringRef target);

/// The `ptxas` used for cubins and PTX checks: $KILN_PTXAS, else
/// $CUDA_HOME/bin/ptxas, else /usr/local/cuda/bin/ptxas, else PATH. Empty
/// when there is none.
std::string findPtxas();

struct CompileOptions {
  std::string target = "host";
  /// Kernel to compile when the module holds several (empty: the only one).
  std::string kernel;
  /// Print the IR after every pass and the LLVM IR before and after
  /// optimization to stderr (also enabled by KILN_DUMP_IR=1).
  bool dumpIR = false;
  unsigned optLevel = 3;
  /// GPU targets: warps per thread block (1 to 32).
  unsigned numWarps = 4;
  /// GPU targets: software pipelining depth of loads in loops (1 to 8;
  /// 1 = off). Lowered without pipelining where the stages do not fit.
  unsigned numStages = 2;
  /// sm_90a: load pipelined tiles with TMA where the views allow it.
  bool tma = true;
  /// sm_90a: pipelined wgmma operand tiles of 128-byte rows in the 128B
  /// swizzle (else the no-swizzle core layout); mma.sync: operand tiles of
  /// whole 128-byte rows XOR-swizzled (else padded rows).
  bool swizzle = true;
  /// sm_90a: loops marked kiln.overlap compute their scores an iteration
  /// ahead (docs/gpu.md, "Overlap"); false ignores the marks.
  bool overlap = true;
  /// sm_90a: tensor maps of views made from arguments encoded by the
  /// runtime at launch (kernel parameters); false: built by every program.
  bool hostMaps = true;
  /// GPU targets: pipeline gathers of rows by a loaded index block in loops
  /// (docs/gpu.md, "Pipelined gathers"); false: waited for where issued.
  bool pipelineGathers = true;
  /// sm_90a: fp8 dots on wgmma's e4m3 / e5m2 forms where their operands are
  /// K-major loads (docs/gpu.md); false: decoded to bf16 as elsewhere.
  bool fp8Wgmma = true;
  /// sm_90a: warpgroups take turns issuing the wgmma groups of loops with a
  /// register-A dot (docs/gpu.md, "Pingpong"); false: all issue together.
  bool pingpong = true;
  /// GPU targets: put a cubin (assembled by ptxas) in the bundle, not PTX.
  bool cubin = false;
};

struct CompileResult {
  KernelInfo kernel;
  CPUTarget target;
  std::string bytes; // the requested artifact
};

/// Formats a diagnostic as `file:line:col: error: message` (the form editors
/// and terminals link), with its notes on following lines.
std::string formatDiagnostic(mlir::Diagnostic &diagnostic);

/// Registers the dialects a kiln module may use.
void registerDialects(mlir::DialectRegistry &registry);

/// Compiles `module` (consumed: it is lowered in place) to `emit`. Errors
/// carry the failing pass and the op's location.
llvm::Expected<CompileResult> compileModule(mlir::ModuleOp module,
                                            const CompileOptions &options,
                                            EmitKind emit);

/// The deepest nesting of brackets and regions a source may have
/// (`checkSourceNesting`): MLIR's parser recurses once per level, and ran
/// out of stack (a crash) at about 20000 levels on an 8 MiB stack.
inline constexpr unsigned kMaxSourceNesting = 512;

/// An error located at `bufferName:line:col` where `source` nests brackets
/// ((, [, {, <, outside strings and comments) deeper than kMaxSourceNesting;
/// success otherwise. Every parse of user text calls it first.
llvm::Error checkSourceNesting(llvm::StringRef source,
                               llvm::StringRef bufferName);

/// Parses `source` (named `bufferName` in diagnostics) and compiles it.
llvm::Expected<CompileResult> compileSource(mlir::MLIRContext &context,
                                            llvm::StringRef source,
                                            llvm::StringRef bufferName,
                                            const CompileOptions &options,
                                            EmitKind emit);

/// Describes the kernel `name` (or the only kernel) of `module`.
llvm::Expected<KernelInfo> describeKernel(mlir::ModuleOp module,
                                          llvm::StringRef name);

/// A C/C++ header declaring a typed launcher for `kernel`.
std::string emitCHeader(const KernelInfo &kernel);

/// Builds bundle bytes from a manifest and code (docs/bundle-format.md):
/// format version 3 when the kernel takes tensor maps the runtime encodes
/// (`tensorMaps`), 2 when it takes the hidden scratch argument
/// (`scratchBytes` > 0), so that runtimes that would not pass them refuse
/// the bundle, else 1.
std::string writeBundle(llvm::StringRef manifest, llvm::StringRef code,
                        int64_t scratchBytes = 0, bool tensorMaps = false);

} // namespace kiln

#endif // KILN_TARGET_CPU_COMPILER_H
