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

#include "kiln/Ops/Ops.h"
#include "kiln/Target/CPU/Compiler.h"
#include "kiln/Target/CPU/Pipeline.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <cstring>
#include <map>
#include <optional>

using namespace llvm;

static cl::OptionCategory kilncCategory("kilnc options");

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<kernel.mlir>"),
                                      cl::Required, cl::cat(kilncCategory));
static cl::opt<std::string> outputFile("o", cl::desc("Output file ('-' for stdout)"),
                                       cl::value_desc("file"), cl::init("-"), cl::cat(kilncCategory));
static cl::opt<std::string>
    target("target",
           cl::desc("Target: host (default), x86-64 (= host), "
                    "x86-64-avx512-bf16, x86-64-avx512, x86-64-avx2, x86-64-sse; NVIDIA GPUs: sm_80, sm_86, "
                    "sm_87, sm_89, sm_90, sm_90a, sm_100, sm_120; emu-sm_XY: a GPU's "
                    "lowering run on this CPU by the emulator (tests)"),
           cl::init("host"), cl::cat(kilncCategory));
static cl::opt<std::string> kernelName("kernel",
                                       cl::desc("Kernel to compile when the file "
                                                "holds several"),
                                       cl::init(""), cl::cat(kilncCategory));
/// --emit's spellings: `ptx` and `cubin` are `asm` and `obj` for GPU targets
/// only (a CPU target refuses them rather than writing x86 under their name).
enum class EmitChoice { MLIR, LLVM, Asm, Ptx, Obj, Cubin, Bundle, CHeader };
static cl::opt<EmitChoice> emit(
    "emit", cl::desc("What to produce"), cl::init(EmitChoice::Bundle),
    cl::values(clEnumValN(EmitChoice::MLIR, "mlir",
                          "the LLVM-dialect MLIR after kiln-cpu-pipeline"),
               clEnumValN(EmitChoice::LLVM, "llvm", "optimized LLVM IR"),
               clEnumValN(EmitChoice::Asm, "asm", "assembly (PTX for GPU targets)"),
               clEnumValN(EmitChoice::Ptx, "ptx", "PTX (GPU targets; same as asm)"),
               clEnumValN(EmitChoice::Obj, "obj",
                          "an ELF object file (a cubin for GPU targets)"),
               clEnumValN(EmitChoice::Cubin, "cubin",
                          "a cubin (GPU targets, through ptxas; same as obj)"),
               clEnumValN(EmitChoice::Bundle, "bundle",
                          "a kernel bundle for the runtime (default)"),
               clEnumValN(EmitChoice::CHeader, "c-header",
                          "a C header with a typed launcher")), cl::cat(kilncCategory));
static cl::opt<bool> printAfterAll(
    "kiln-print-after-all",
    cl::desc("Print the IR after every pass, and the LLVM IR before and after "
             "optimization, to stderr (same as KILN_DUMP_IR=1)"), cl::cat(kilncCategory));
static cl::opt<unsigned> optLevel("opt-level", cl::desc("LLVM optimization level (0-3)"),
                                  cl::init(3), cl::cat(kilncCategory));
static cl::opt<unsigned> numWarps("num-warps",
                                  cl::desc("GPU targets: warps per thread block "
                                           "(1-32, default 4)"),
                                  cl::init(4), cl::cat(kilncCategory));
static cl::opt<unsigned> numStages(
    "num-stages",
    cl::desc("GPU targets: software pipelining depth of loads in loops "
             "(1 = off, default 2)"),
    cl::init(2), cl::cat(kilncCategory));
static cl::opt<bool> noTma("no-tma",
                           cl::desc("sm_90a: load pipelined tiles with "
                                    "cp.async, not TMA"),
                           cl::cat(kilncCategory));
static cl::opt<bool> noFp8Wgmma(
    "no-fp8-wgmma",
    cl::desc("sm_90a: decode fp8 dot operands to bf16 (not wgmma's e4m3 / "
             "e5m2 forms)"),
    cl::cat(kilncCategory));
static cl::opt<bool> noPingpong(
    "no-pingpong",
    cl::desc("sm_90a: warpgroups issue attention's wgmma groups together "
             "(no turns ordered by named barriers)"),
    cl::cat(kilncCategory));
static cl::opt<bool> noPipelinedGathers(
    "no-pipelined-gathers",
    cl::desc("GPU targets: wait for gathers by a loaded index block where "
             "they are issued (not pipelined)"),
    cl::cat(kilncCategory));
static cl::opt<bool> noSwizzle(
    "no-swizzle",
    cl::desc("keep pipelined wgmma operands (sm_90a) in the no-swizzle core "
             "layout, not the 128B swizzle, and give mma.sync operands padded "
             "rows, not XOR-swizzled ones"),
    cl::cat(kilncCategory));
static cl::opt<bool> noOverlap(
    "no-overlap",
    cl::desc("sm_90a: ignore kiln.overlap loop marks (attention's scores are "
             "then computed in their own iteration)"),
    cl::cat(kilncCategory));
static cl::opt<bool> deviceMaps(
    "device-maps",
    cl::desc("sm_90a: every program builds its TMA tensor maps (not encoded "
             "by the runtime at launch)"),
    cl::cat(kilncCategory));
static cl::opt<bool> cubinBundle("cubin",
                                 cl::desc("GPU targets: put a cubin (ptxas) in "
                                          "the bundle instead of PTX"),
                                 cl::cat(kilncCategory));

/// Refuses a target and flags that do not go together: an empty --target
/// (it used to mean the host), and GPU-only choices (`gpuOnly`: --emit ptx
/// or cubin, --cubin, --num-warps, ...) for a CPU target, which ignored them.
/// emu-sm_XY targets run the GPU lowering and take its options, but not
/// PTX or cubins: their code is the host's (it was written as x86 under
/// those names).
static bool checkTarget(llvm::StringRef target,
                        llvm::ArrayRef<std::string> gpuOnly) {
  if (target.empty()) {
    WithColor::error(errs(), "kilnc")
        << "--target is empty (give host, x86-64-avx512, sm_90a, ...)\n";
    return false;
  }
  if (target.starts_with("emu-")) {
    for (const std::string &flag : gpuOnly)
      if (flag == "--cubin" || llvm::StringRef(flag).starts_with("--emit ")) {
        WithColor::error(errs(), "kilnc")
            << flag << " needs an NVIDIA target (sm_XY); '" << target
            << "' compiles the GPU lowering to host code for the emulator\n";
        return false;
      }
    return true;
  }
  if (kiln::isGPUTarget(target) || gpuOnly.empty())
    return true;
  WithColor::error(errs(), "kilnc")
      << gpuOnly.front() << " applies to GPU targets (sm_XY), and the target "
      << "is '" << target << "'\n";
  return false;
}

static int writeOutput(const std::string &path, const std::string &bytes,
                       bool binary) {
  std::error_code ec;
  ToolOutputFile out(path, ec, binary ? sys::fs::OF_None : sys::fs::OF_Text);
  if (ec) {
    WithColor::error(errs(), "kilnc")
        << "cannot write '" << path << "': " << ec.message() << "\n";
    return 1;
  }
  out.os() << bytes;
  out.os().flush();
  if (out.os().has_error()) {
    out.os().clear_error();
    WithColor::error(errs(), "kilnc") << "writing '" << path << "' failed\n";
    return 1;
  }
  out.keep();
  return 0;
}

/// kilnc op NAME [--key value]... [-o FILE] [--target T] [--emit KIND]
/// kilnc op --list
static int runOp(int argc, char **argv) {
  auto usage = [] {
    errs() << "usage: kilnc op NAME [--key value]... [-o FILE] [--target T] "
              "[--emit bundle|mlir|llvm|asm|ptx|obj|cubin|c-header|kiln]\n"
              "       [--num-warps N] [--num-stages N] [--no-tma] [--no-swizzle]\n"
              "       [--no-overlap] [--device-maps] [--no-pipelined-gathers]\n"
              "       [--no-fp8-wgmma] [--no-pingpong] [--cubin]\n"
              "       kilnc op --list\n";
    return 1;
  };
  if (argc < 3)
    return usage();
  std::string name = argv[2];
  // `kilnc op --help`, `kilnc op NAME --help`: the usage and the operator's
  // parameters (it read --help as a parameter needing a value).
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      usage();
      for (const kiln::ops::OpInfo &op : kiln::ops::registry()) {
        if (op.name != name)
          continue;
        outs() << op.name << ": " << op.summary << "\n";
        for (const kiln::ops::Param &p : op.params)
          outs() << "    --" << p.name << " ("
                 << (p.defaultValue.empty() ? "required" : "default " + p.defaultValue)
                 << ") " << p.help << "\n";
      }
      return 0;
    }
  if (name == "--list" || name == "-l") {
    for (const kiln::ops::OpInfo &op : kiln::ops::registry()) {
      outs() << op.name << ": " << op.summary << "\n";
      for (const kiln::ops::Param &p : op.params)
        outs() << "    --" << p.name << " (" << (p.defaultValue.empty() ? "required" : "default " + p.defaultValue)
               << ") " << p.help << "\n";
    }
    return 0;
  }
  std::map<std::string, std::string> config;
  std::string output = "-", targetName = "host", emitName = "bundle",
              warps = "4", stagesText = "2";
  bool cubin = false, tma = true, swizzle = true, overlap = true, hostMaps = true,
       pipelineGathers = true, fp8Wgmma = true, pingpong = true;
  std::vector<std::string> gpuOnly; // GPU-only flags given, for checkTarget
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    // kilnc's own valued flags also as --flag=value (LLVM's spelling in
    // file mode; here it was read as an operator parameter named 'target').
    std::optional<std::string> inlineValue;
    for (const char *flag : {"--target", "--emit", "--num-warps", "--num-stages"})
      if (a.rfind(std::string(flag) + "=", 0) == 0) {
        inlineValue = a.substr(std::strlen(flag) + 1);
        a = flag;
      }
    auto value = [&](std::string &dst) {
      if (inlineValue) {
        dst = *inlineValue;
        return true;
      }
      if (i + 1 >= argc)
        return false;
      dst = argv[++i];
      return true;
    };
    if (a == "-o") {
      if (!value(output))
        return usage();
    } else if (a == "--target") {
      if (!value(targetName))
        return usage();
    } else if (a == "--emit") {
      if (!value(emitName))
        return usage();
    } else if (a == "--num-warps") {
      if (!value(warps))
        return usage();
      gpuOnly.push_back("--num-warps");
    } else if (a == "--num-stages") {
      if (!value(stagesText))
        return usage();
      gpuOnly.push_back("--num-stages");
    } else if (a == "--cubin") {
      cubin = true;
      gpuOnly.push_back("--cubin");
    } else if (a == "--no-tma") {
      tma = false;
      gpuOnly.push_back("--no-tma");
    } else if (a == "--no-swizzle") {
      swizzle = false;
      gpuOnly.push_back("--no-swizzle");
    } else if (a == "--no-overlap") {
      overlap = false;
      gpuOnly.push_back("--no-overlap");
    } else if (a == "--device-maps") {
      hostMaps = false;
      gpuOnly.push_back("--device-maps");
    } else if (a == "--no-pipelined-gathers") {
      pipelineGathers = false;
      gpuOnly.push_back("--no-pipelined-gathers");
    } else if (a == "--no-fp8-wgmma") {
      fp8Wgmma = false;
      gpuOnly.push_back("--no-fp8-wgmma");
    } else if (a == "--no-pingpong") {
      pingpong = false;
      gpuOnly.push_back("--no-pingpong");
    } else if (a.rfind("--", 0) == 0) {
      std::string key = a.substr(2), v;
      size_t eq = key.find('=');
      if (eq != std::string::npos) {
        v = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else if (!value(v)) {
        WithColor::error(errs(), "kilnc") << "--" << key << " needs a value\n";
        return 1;
      }
      if (!config.emplace(key, v).second) {
        WithColor::error(errs(), "kilnc") << "--" << key << " is given twice\n";
        return 1;
      }
    } else {
      WithColor::error(errs(), "kilnc") << "unexpected argument '" << a << "'\n";
      return usage();
    }
  }
  auto source = kiln::ops::buildOpSource(name, config);
  if (!source) {
    WithColor::error(errs(), "kilnc") << toString(source.takeError()) << "\n";
    return 1;
  }
  if (emitName == "kiln")
    return writeOutput(output, *source, false);
  static const std::map<std::string, kiln::EmitKind> kinds = {
      {"bundle", kiln::EmitKind::Bundle}, {"mlir", kiln::EmitKind::MLIR},
      {"llvm", kiln::EmitKind::LLVM},     {"asm", kiln::EmitKind::Asm},
      {"obj", kiln::EmitKind::Obj},       {"c-header", kiln::EmitKind::CHeader},
      {"ptx", kiln::EmitKind::Asm},       {"cubin", kiln::EmitKind::Obj}};
  auto kind = kinds.find(emitName);
  if (kind == kinds.end()) {
    WithColor::error(errs(), "kilnc") << "unknown --emit '" << emitName << "'\n";
    return 1;
  }
  if (emitName == "ptx" || emitName == "cubin")
    gpuOnly.insert(gpuOnly.begin(), "--emit " + emitName);
  if (!checkTarget(targetName, gpuOnly))
    return 1;
  mlir::DialectRegistry registry;
  kiln::registerDialects(registry);
  mlir::MLIRContext context(registry);
  kiln::CompileOptions options;
  options.target = targetName;
  options.cubin = cubin;
  options.tma = tma;
  options.swizzle = swizzle;
  options.overlap = overlap;
  options.hostMaps = hostMaps;
  options.pipelineGathers = pipelineGathers;
  options.fp8Wgmma = fp8Wgmma;
  options.pingpong = pingpong;
  if (llvm::StringRef(warps).getAsInteger(10, options.numWarps)) {
    WithColor::error(errs(), "kilnc") << "--num-warps needs an integer\n";
    return 1;
  }
  if (llvm::StringRef(stagesText).getAsInteger(10, options.numStages)) {
    WithColor::error(errs(), "kilnc") << "--num-stages needs an integer\n";
    return 1;
  }
  auto result = kiln::compileSource(context, *source, "op:" + name, options,
                                    kind->second);
  if (!result) {
    WithColor::error(errs(), "kilnc") << toString(result.takeError()) << "\n";
    return 1;
  }
  return writeOutput(output, result->bytes,
                     kind->second == kiln::EmitKind::Bundle ||
                         kind->second == kiln::EmitKind::Obj);
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::SetVersionPrinter([](raw_ostream &os) {
    os << "kilnc (" << kiln::compilerVersion() << "), on LLVM "
       << LLVM_VERSION_STRING << "\n";
  });
  if (argc > 1 && std::string(argv[1]) == "op")
    return runOp(argc, argv);
  cl::HideUnrelatedOptions(kilncCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "Kiln ahead-of-time compiler\n\n"
      "  kilnc kernel.mlir -o kernel.kiln      compile a kernel file\n"
      "  kilnc op NAME [--key value ...] -o F  compile a library operator\n"
      "  kilnc op --list                       the operators and their keys\n\n"
      "LLVM's own options are accepted too; --help-hidden lists them.\n");

  static const std::pair<EmitChoice, kiln::EmitKind> kinds[] = {
      {EmitChoice::MLIR, kiln::EmitKind::MLIR},
      {EmitChoice::LLVM, kiln::EmitKind::LLVM},
      {EmitChoice::Asm, kiln::EmitKind::Asm},
      {EmitChoice::Ptx, kiln::EmitKind::Asm},
      {EmitChoice::Obj, kiln::EmitKind::Obj},
      {EmitChoice::Cubin, kiln::EmitKind::Obj},
      {EmitChoice::Bundle, kiln::EmitKind::Bundle},
      {EmitChoice::CHeader, kiln::EmitKind::CHeader}};
  kiln::EmitKind emitKind = kiln::EmitKind::Bundle;
  for (auto [choice, kind] : kinds)
    if (emit == choice)
      emitKind = kind;
  std::vector<std::string> gpuOnly;
  if (emit == EmitChoice::Ptx || emit == EmitChoice::Cubin)
    gpuOnly.push_back(emit == EmitChoice::Ptx ? "--emit ptx" : "--emit cubin");
  for (const cl::Option *flag :
       std::initializer_list<const cl::Option *>{&cubinBundle, &numWarps, &numStages,
                                                 &noTma, &noSwizzle, &noOverlap,
                                                 &deviceMaps, &noPipelinedGathers,
                                                 &noFp8Wgmma, &noPingpong})
    if (flag->getNumOccurrences())
      gpuOnly.push_back("--" + flag->ArgStr.str());
  if (!checkTarget(target, gpuOnly))
    return 1;
  if (optLevel > 3) {
    WithColor::error(errs(), "kilnc")
        << "--opt-level must be 0, 1, 2 or 3 (got " << optLevel << ")\n";
    return 1;
  }
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
  options.numWarps = numWarps;
  options.numStages = numStages;
  options.cubin = cubinBundle;
  options.tma = !noTma;
  options.swizzle = !noSwizzle;
  options.overlap = !noOverlap;
  options.hostMaps = !deviceMaps;
  options.pipelineGathers = !noPipelinedGathers;
  options.fp8Wgmma = !noFp8Wgmma;
  options.pingpong = !noPingpong;
  auto result = kiln::compileSource(context, (*input)->getBuffer(), inputFile,
                                    options, emitKind);
  if (!result) {
    WithColor::error(errs(), "kilnc") << toString(result.takeError()) << "\n";
    return 1;
  }
  bool binary =
      emitKind == kiln::EmitKind::Obj || emitKind == kiln::EmitKind::Bundle;
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
