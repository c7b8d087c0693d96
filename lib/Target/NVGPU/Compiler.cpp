//===- Compiler.cpp - Compile kiln modules to PTX/cubin bundles -----------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The NVIDIA half of kiln::compileModule: kiln IR -> kiln-gpu-pipeline (SIMT
// code in a gpu.module, then NVVM/LLVM) -> LLVM IR -> NVPTX O3 -> PTX ->
// (ptxas) cubin -> bundle with `target sm_XY[a]`, `code ptx|cubin` and the
// launch parameters num_warps and shared_bytes (docs/bundle-format.md).
//
//===----------------------------------------------------------------------===//

#include "../CPU/CompilerSupport.h"
#include "kiln/Target/CPU/Compiler.h"
#include "kiln/Dialect/Kiln/IR/Kiln.h"
#include "kiln/Target/CPU/Pipeline.h"
#include "kiln/Target/GPUChips.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/Module.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Triple.h"

#include <mutex>

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

using namespace kiln::detail;
using mlir::ModuleOp;

namespace {

llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
createNVPTXTargetMachine(llvm::StringRef chip, unsigned optLevel) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string err;
  const llvm::Target *t = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!t)
    return makeError("LLVM has no NVPTX target: " + err);
  // The chip's PTX ISA version (GPUChips.h): NVPTX aborts on a version
  // older than the chip.
  const kiln::GPUChip *gpu = kiln::findGPUChip(chip);
  if (!gpu)
    return makeError("unknown GPU target '" + chip + "'; known: " + kiln::knownGPUChips());
  std::string features = "+ptx" + std::to_string(gpu->ptxVersion);
  llvm::TargetOptions opts;
  auto level = optLevel >= 2 ? llvm::CodeGenOptLevel::Aggressive
                             : llvm::CodeGenOptLevel::Less;
  std::unique_ptr<llvm::TargetMachine> tm(t->createTargetMachine(
      triple, chip, features, opts, std::nullopt, std::nullopt, level));
  if (!tm)
    return makeError("could not create an LLVM target machine for " + chip);
  return tm;
}

/// Assembles PTX into a cubin with ptxas.
llvm::Expected<std::string> assemble(llvm::StringRef ptx,
                                     llvm::StringRef chip) {
  std::string ptxas = kiln::findPtxas();
  if (ptxas.empty())
    return makeError("a cubin needs ptxas (the CUDA toolkit): set KILN_PTXAS "
                     "or CUDA_HOME, or emit PTX");
  std::string arch = ("-arch=" + chip).str();
  return runToolOnFile(
      "ptxas " + arch, ptx, "ptx", "cubin",
      [&](llvm::StringRef in, llvm::StringRef out) {
        return llvm::SmallVector<llvm::StringRef>{ptxas, arch, "-O3", "-o", out, in};
      },
      300);
}

/// libdevice (the CUDA toolkit's math library as LLVM bitcode): the math
/// the GPU lowering leaves to it (sqrt, floor, ...) is linked in and inlined,
/// so bundles never depend on it.
std::string findLibdevice() {
  if (const char *p = std::getenv("KILN_LIBDEVICE"); p && *p)
    return p;
  llvm::SmallVector<std::string> roots;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *root = std::getenv(var); root && *root)
      roots.push_back(root);
  std::string ptxas = kiln::findPtxas();
  if (!ptxas.empty())
    roots.push_back(llvm::sys::path::parent_path(
                        llvm::sys::path::parent_path(ptxas))
                        .str());
  roots.push_back("/usr/local/cuda");
  for (const std::string &r : roots) {
    std::string p = r + "/nvvm/libdevice/libdevice.10.bc";
    if (llvm::sys::fs::exists(p))
      return p;
  }
  return {};
}

llvm::Error linkLibdevice(llvm::Module &module, llvm::StringRef kernel) {
  bool needed = false;
  for (llvm::Function &f : module)
    if (f.isDeclaration() && f.getName().starts_with("__nv_"))
      needed = true;
  if (!needed)
    return llvm::Error::success();
  std::string path = findLibdevice();
  if (path.empty())
    return makeError("kernel '" + kernel +
                     "' uses math that needs libdevice from the CUDA toolkit "
                     "(nvvm/libdevice/libdevice.10.bc), which was not found: "
                     "set CUDA_HOME or KILN_LIBDEVICE");
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf)
    return makeError("cannot read " + path);
  auto lib = llvm::parseBitcodeFile((*buf)->getMemBufferRef(),
                                    module.getContext());
  if (!lib)
    return makeError("cannot parse " + path + ": " +
                     llvm::toString(lib.takeError()));
  (*lib)->setDataLayout(module.getDataLayout());
  (*lib)->setTargetTriple(module.getTargetTriple());
  if (llvm::Linker::linkModules(module, std::move(*lib),
                                llvm::Linker::LinkOnlyNeeded))
    return makeError("linking " + path + " failed");
  for (llvm::Function &f : module)
    if (!f.isDeclaration() && f.getCallingConv() != llvm::CallingConv::PTX_Kernel)
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
  return llvm::Error::success();
}

std::string buildGPUManifest(const kiln::KernelInfo &k, llvm::StringRef chip,
                             bool cubin, unsigned numWarps,
                             int64_t sharedBytes, int64_t scratchBytes,
                             llvm::ArrayRef<std::string> tensorMaps) {
  std::string m;
  llvm::raw_string_ostream os(m);
  os << "kiln-bundle 1\n"
     << "name " << k.name << "\n"
     << "entry " << k.name << "\n"
     << "target " << chip << "\n"
     << "code " << (cubin ? "cubin" : "ptx") << "\n"
     << "compiler " << kiln::compilerVersion() << "\n"
     << "grid-rank " << k.gridRank << "\n"
     << "launch num_warps " << numWarps << "\n"
     << "launch shared_bytes " << sharedBytes << "\n";
  // TMA tensor maps live in a per-program scratch the runtime passes as a
  // hidden last argument.
  if (scratchBytes)
    os << "launch scratch_bytes " << scratchBytes << "\n";
  for (const auto &a : k.args)
    os << "arg " << a.name << " " << a.kind << " " << a.dtype << "\n";
  os << kiln::writesLine(k);
  // Tensor maps the runtime encodes at launch: hidden parameters after the
  // scratch (an i32 of flags, then one 128-byte map each).
  for (const std::string &t : tensorMaps)
    os << "tensor_map " << t << "\n";
  return m;
}

} // namespace

std::string kiln::findPtxas() {
  if (const char *p = std::getenv("KILN_PTXAS"); p && *p)
    return llvm::sys::fs::can_execute(p) ? std::string(p) : std::string();
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *root = std::getenv(var); root && *root) {
      std::string p = std::string(root) + "/bin/ptxas";
      if (llvm::sys::fs::can_execute(p))
        return p;
    }
  if (llvm::sys::fs::can_execute("/usr/local/cuda/bin/ptxas"))
    return "/usr/local/cuda/bin/ptxas";
  if (auto p = llvm::sys::findProgramByName("ptxas"))
    return *p;
  return {};
}

llvm::Expected<kiln::CompileResult>
kiln::detail::compileModuleGPU(ModuleOp module, const CompileOptions &options,
                               EmitKind emit, const KernelInfo &info) {
  llvm::StringRef chip = options.target;
  if (!kiln::findGPUChip(chip))
    return makeError("unknown GPU target '" + chip + "'; known: " + kiln::knownGPUChips());
  if (options.numWarps < 1 || options.numWarps > 32)
    return makeError("num_warps must be in [1, 32], not " +
                     llvm::Twine(options.numWarps));
  if (options.numStages < 1 || options.numStages > 8)
    return makeError("num_stages must be in [1, 8], not " +
                     llvm::Twine(options.numStages));
  CompileResult result;
  result.kernel = info;
  result.target.name = chip.str();
  if (emit == EmitKind::CHeader) {
    result.bytes = emitCHeader(info);
    return result;
  }
  llvm::SmallVector<mlir::kiln::FuncOp> others;
  module.walk([&](mlir::kiln::FuncOp f) {
    if (f.getSymName() != info.name)
      others.push_back(f);
  });
  for (auto f : others)
    f.erase();

  MLIRContext *ctx = module.getContext();
  DiagnosticCollector diags(ctx);
  bool dump = options.dumpIR || dumpIRFromEnv();
  mlir::PassManager pm(ctx);
  std::string failedPass;
  pm.addInstrumentation(std::make_unique<FailedPassRecorder>(&failedPass));
  if (dump) {
    ctx->disableMultithreading();
    pm.enableIRPrinting(
        [](Pass *, Operation *) { return false; },
        [](Pass *, Operation *) { return true; }, true, false, false,
        llvm::errs());
  }
  mlir::kiln::GPUPipelineOptions pipelineOptions;
  pipelineOptions.chip = chip.str();
  pipelineOptions.numWarps = options.numWarps;
  pipelineOptions.numStages = options.numStages;
  pipelineOptions.tma = options.tma;
  pipelineOptions.swizzle = options.swizzle;
  pipelineOptions.overlap = options.overlap;
  pipelineOptions.hostMaps = options.hostMaps;
  pipelineOptions.pipelineGathers = options.pipelineGathers;
  pipelineOptions.fp8Wgmma = options.fp8Wgmma;
  pipelineOptions.pingpong = options.pingpong;
  mlir::kiln::buildGPUPipeline(pm, pipelineOptions);
  if (mlir::failed(pm.run(module))) {
    std::string where =
        failedPass.empty() ? std::string() : " in pass '" + failedPass + "'";
    return makeError("kernel '" + info.name + "' failed to compile for " +
                     chip + where + ":\n" + diags.text);
  }
  if (emit == EmitKind::MLIR) {
    llvm::raw_string_ostream os(result.bytes);
    module.print(os);
    return result;
  }

  // The device code: the gpu.module's contents as an LLVM module.
  mlir::gpu::GPUModuleOp gpuModule;
  module.walk([&](mlir::gpu::GPUModuleOp m) { gpuModule = m; });
  if (!gpuModule)
    return makeError("kernel '" + info.name + "': no device code produced");
  int64_t sharedBytes = 0;
  if (auto s = module->getAttrOfType<mlir::IntegerAttr>("kiln.shared_bytes." +
                                                        info.name))
    sharedBytes = s.getInt();
  int64_t scratchBytes = 0;
  if (auto s = module->getAttrOfType<mlir::IntegerAttr>("kiln.scratch_bytes." +
                                                        info.name))
    scratchBytes = s.getInt();
  llvm::SmallVector<std::string> tensorMaps;
  if (auto a = module->getAttrOfType<mlir::ArrayAttr>("kiln.tensor_maps." +
                                                      info.name))
    for (mlir::Attribute s : a)
      tensorMaps.push_back(llvm::cast<mlir::StringAttr>(s).str());
  mlir::OwningOpRef<ModuleOp> device = ModuleOp::create(module.getLoc());
  for (Operation &op :
       llvm::make_early_inc_range(gpuModule.getBody()->getOperations())) {
    if (auto fn = llvm::dyn_cast<mlir::LLVM::LLVMFuncOp>(op)) {
      for (llvm::StringRef name :
           {"kiln.shared_bytes", "kiln.scratch_bytes", "kiln.signature",
            "kiln.grid_rank", "kiln.tensor_maps",
            "gpu.kernel"})
        fn->removeAttr(name);
      // Host maps: the last parameters, each a CUtensorMap passed by value
      // in the parameter space (CUDA's `const __grid_constant__ CUtensorMap`:
      // .param .align 64 .b8 [128], whose generic address TMA takes).
      if (fn.getSymName() == info.name && !tensorMaps.empty()) {
        MLIRContext *c = fn.getContext();
        unsigned n = fn.getNumArguments();
        for (unsigned i = n - tensorMaps.size(); i < n; ++i) {
          fn.setArgAttr(i, "llvm.byval",
                        mlir::TypeAttr::get(mlir::LLVM::LLVMArrayType::get(
                            mlir::IntegerType::get(c, 8), 128)));
          fn.setArgAttr(i, "llvm.align",
                        mlir::IntegerAttr::get(mlir::IntegerType::get(c, 64), 64));
          fn.setArgAttr(i, "nvvm.grid_constant", mlir::UnitAttr::get(c));
        }
      }
    }
    op.moveBefore(device->getBody(), device->getBody()->end());
  }
  llvm::LLVMContext llvmContext;
  auto llvmModule =
      mlir::translateModuleToLLVMIR(*device, llvmContext, info.name);
  if (!llvmModule)
    return makeError("kernel '" + info.name +
                     "': translation to LLVM IR failed:\n" + diags.text);
  auto tm = createNVPTXTargetMachine(chip, options.optLevel);
  if (!tm)
    return tm.takeError();
  llvmModule->setDataLayout((*tm)->createDataLayout());
  llvmModule->setTargetTriple((*tm)->getTargetTriple());
  if (dump)
    llvm::errs() << "// -----// LLVM IR before optimization //----- //\n"
                 << *llvmModule;
  if (auto err = linkLibdevice(*llvmModule, info.name))
    return std::move(err);
  if (auto err = optimize(*llvmModule, **tm, options.optLevel))
    return std::move(err);
  // Math the GPU path does not approximate would call libdevice, which a
  // bundle cannot link: refuse it here rather than fail in ptxas.
  // (vprintf and __assertfail, which kiln.print and kiln.assert call, are
  // PTX system calls: the driver provides them to every module.)
  for (llvm::Function &f : *llvmModule)
    if (f.isDeclaration() && !f.isIntrinsic() && !f.use_empty() &&
        f.getName() != "vprintf" && f.getName() != "__assertfail")
      return makeError("kernel '" + info.name + "' calls '" + f.getName() +
                       "', which the " + chip +
                       " target does not provide (an operation without a GPU "
                       "lowering)");
  if (dump)
    llvm::errs() << "// -----// LLVM IR after optimization //----- //\n"
                 << *llvmModule;
  if (emit == EmitKind::LLVM) {
    llvm::raw_string_ostream os(result.bytes);
    llvmModule->print(os, nullptr);
    return result;
  }
  auto ptx = emitMachineCode(*llvmModule, **tm, /*assembly=*/true);
  if (!ptx)
    return ptx.takeError();
  if (emit == EmitKind::Asm) {
    result.bytes = std::move(*ptx);
    return result;
  }
  bool wantCubin = emit == EmitKind::Obj || options.cubin;
  std::string code = std::move(*ptx);
  if (wantCubin) {
    auto cubin = assemble(code, chip);
    if (!cubin)
      return cubin.takeError();
    if (emit == EmitKind::Obj) {
      result.bytes = std::move(*cubin);
      return result;
    }
    code = std::move(*cubin);
  }
  std::string manifest = buildGPUManifest(info, chip, wantCubin, options.numWarps,
                                          sharedBytes, scratchBytes, tensorMaps);
  if (!wantCubin) {
    // PTX carries the manifest it was compiled for, as comments the runtime
    // compares with the bundle's (as a CPU bundle's kiln_manifest symbol;
    // docs/bundle-format.md, "Code (GPU targets)"). A cubin keeps none.
    if (!code.empty() && code.back() != '\n')
      code += '\n';
    code += "// The manifest this code was compiled for:\n";
    for (llvm::StringRef rest = manifest; !rest.empty();) {
      auto [line, next] = rest.split('\n');
      code += "// kiln_manifest " + line.str() + "\n";
      rest = next;
    }
  }
  result.bytes =
      writeBundle(manifest, code, scratchBytes, !tensorMaps.empty());
  return result;
}
