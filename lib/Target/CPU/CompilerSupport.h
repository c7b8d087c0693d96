//===- CompilerSupport.h - Pieces shared by the compile paths ---*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Private to lib/Target: the CPU path (CPU/Compiler.cpp) and the NVIDIA path
// (NVGPU/Compiler.cpp) share error plumbing, pass instrumentation and the
// LLVM optimization pipeline.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_TARGET_COMPILERSUPPORT_H
#define KILN_LIB_TARGET_COMPILERSUPPORT_H

#include "kiln/Target/CPU/Compiler.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/Error.h"
#include "llvm/Target/TargetMachine.h"

#include <cstdlib>
#include <string>
#include <vector>

namespace kiln::detail {

using mlir::Diagnostic;
using mlir::MLIRContext;
using mlir::Operation;
using mlir::Pass;
using mlir::PassInstrumentation;
using mlir::ScopedDiagnosticHandler;

inline llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

inline bool dumpIRFromEnv() {
  const char *v = std::getenv("KILN_DUMP_IR");
  return v && *v && std::string(v) != "0";
}

/// Names the pass that failed, so a compile error says where it happened.
struct FailedPassRecorder : public PassInstrumentation {
  std::string *failedPass;
  explicit FailedPassRecorder(std::string *p) : failedPass(p) {}
  void runAfterPassFailed(Pass *pass, Operation *) override {
    if (failedPass->empty())
      *failedPass = pass->getArgument().str();
  }
};

/// Collects diagnostics as text, with file:line:col locations.
struct DiagnosticCollector {
  std::string text;
  ScopedDiagnosticHandler handler;
  explicit DiagnosticCollector(MLIRContext *ctx)
      : handler(ctx, [this](Diagnostic &d) {
          text += kiln::formatDiagnostic(d);
          return mlir::success();
        }) {}
};

/// Runs LLVM's default pipeline at `optLevel` for `tm`.
llvm::Error optimize(llvm::Module &module, llvm::TargetMachine &tm,
                     unsigned optLevel);

/// Emits assembly (or an object) for `module` with `tm`.
llvm::Expected<std::string> emitMachineCode(llvm::Module &module,
                                            llvm::TargetMachine &tm,
                                            bool assembly);

/// Runs `args[0]` (an absolute path) with `args`, stdin from /dev/null and
/// stdout and stderr into `outputPath`, and waits for it: its exit status,
/// or an error (it could not start, was killed by a signal, or ran past
/// `timeoutSeconds` and was killed). Unlike llvm::sys::ExecuteAndWait with
/// a timeout, it touches no process-wide state: that one set alarm() and a
/// SIGALRM handler (cancelling the application's alarm, and leaving its
/// handler replaced when threads compiled at once), failed with "Child
/// timed out" when any handled signal interrupted its wait, and then reaped
/// whichever child exited (the application's own). This polls its child's
/// pid alone (RunTool.cpp). The tool gets the environment the process had
/// when the library loaded (the live one races with other threads' setenv).
llvm::Expected<int> runTool(llvm::ArrayRef<llvm::StringRef> args,
                            llvm::StringRef outputPath, unsigned timeoutSeconds);

/// Runs a tool that turns one file into another (the system linker,
/// ptxas): `input` is written to a temporary file named `*.inSuffix`,
/// `args(in, out)` is the command line, and the output file's bytes come
/// back. The temporary files are removed on every path (no signal handlers:
/// the JIT is a library inside applications); writes are checked (a full
/// disk was LLVM's fatal "IO failure on output stream", which ended the
/// application). A failure, or an exit status of 0 with an empty output, is
/// an error naming `what`, with the tool's messages.
llvm::Expected<std::string> runToolOnFile(
    llvm::StringRef what, llvm::StringRef input, llvm::StringRef inSuffix,
    llvm::StringRef outSuffix,
    llvm::function_ref<llvm::SmallVector<llvm::StringRef>(llvm::StringRef in,
                                                          llvm::StringRef out)>
        args,
    unsigned timeoutSeconds);

/// The NVIDIA compile path (lib/Target/NVGPU/Compiler.cpp): `module` holds
/// only the chosen kernel.
llvm::Expected<CompileResult> compileModuleGPU(mlir::ModuleOp module,
                                               const CompileOptions &options,
                                               EmitKind emit,
                                               const KernelInfo &info);

} // namespace kiln::detail

#endif // KILN_LIB_TARGET_COMPILERSUPPORT_H
