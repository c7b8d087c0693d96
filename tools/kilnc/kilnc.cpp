//===- kilnc.cpp - The Kiln ahead-of-time compiler --------------------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
//   kilnc kernel.mlir --target x86-64 -o kernel.kiln
//   kilnc kernel.mlir --emit c-header -o kernel.h
//
// Compiles one kernel through the same pipeline as the JIT and writes a
// bundle (default), an object, assembly, LLVM IR, the lowered MLIR, or a C
// header with a typed launcher for the runtime.
//
//===----------------------------------------------------------------------===//

#include "kiln/Target/CPU/Compiler.h"
#include "kiln/Target/CPU/Pipeline.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<kernel.mlir>"),
                                      cl::Required);
static cl::opt<std::string> outputFile("o", cl::desc("Output file ('-' for stdout)"),
                                       cl::value_desc("file"), cl::init("-"));
static cl::opt<std::string>
    target("target",
           cl::desc("Target: host (default), x86-64 (= host), x86-64-avx512, "
                    "x86-64-avx2, x86-64-sse"),
           cl::init("host"));
static cl::opt<std::string> kernelName("kernel",
                                       cl::desc("Kernel to compile when the file "
                                                "holds several"),
                                       cl::init(""));
static cl::opt<kiln::EmitKind> emit(
    "emit", cl::desc("What to produce"), cl::init(kiln::EmitKind::Bundle),
    cl::values(clEnumValN(kiln::EmitKind::MLIR, "mlir",
                          "the LLVM-dialect MLIR after kiln-cpu-pipeline"),
               clEnumValN(kiln::EmitKind::LLVM, "llvm", "optimized LLVM IR"),
               clEnumValN(kiln::EmitKind::Asm, "asm", "assembly"),
               clEnumValN(kiln::EmitKind::Obj, "obj", "an ELF object file"),
               clEnumValN(kiln::EmitKind::Bundle, "bundle",
                          "a kernel bundle for the runtime (default)"),
               clEnumValN(kiln::EmitKind::CHeader, "c-header",
                          "a C header with a typed launcher")));
static cl::opt<bool> printAfterAll(
    "kiln-print-after-all",
    cl::desc("Print the IR after every pass, and the LLVM IR before and after "
             "optimization, to stderr (same as KILN_DUMP_IR=1)"));
static cl::opt<unsigned> optLevel("opt-level", cl::desc("LLVM optimization level (0-3)"),
                                  cl::init(3));

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "Kiln ahead-of-time compiler\n");

  auto input = MemoryBuffer::getFileOrSTDIN(inputFile);
  if (!input) {
    WithColor::error(errs(), "kilnc")
        << "cannot read '" << inputFile << "': " << input.getError().message()
        << "\n";
    return 1;
  }
  mlir::DialectRegistry registry;
  kiln::registerDialects(registry);
  mlir::MLIRContext context(registry);
  kiln::CompileOptions options;
  options.target = target;
  options.kernel = kernelName;
  options.dumpIR = printAfterAll;
  options.optLevel = optLevel;
  auto result = kiln::compileSource(context, (*input)->getBuffer(), inputFile,
                                    options, emit);
  if (!result) {
    WithColor::error(errs(), "kilnc") << toString(result.takeError()) << "\n";
    return 1;
  }
  bool binary = emit == kiln::EmitKind::Obj || emit == kiln::EmitKind::Bundle;
  std::error_code ec;
  ToolOutputFile out(outputFile, ec,
                     binary ? sys::fs::OF_None : sys::fs::OF_Text);
  if (ec) {
    WithColor::error(errs(), "kilnc")
        << "cannot write '" << outputFile << "': " << ec.message() << "\n";
    return 1;
  }
  out.os() << result->bytes;
  out.os().flush();
  if (out.os().has_error()) {
    out.os().clear_error();
    WithColor::error(errs(), "kilnc") << "writing '" << outputFile << "' failed\n";
    return 1;
  }
  out.keep();
  return 0;
}
