//===- Compiler.cpp - Compile kiln modules to x86-64 bundles ---------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "kiln/Target/CPU/Compiler.h"
#include "CompilerSupport.h"
#include "kiln/Dialect/Kiln/IR/Kiln.h"
#include "kiln/Target/CPU/Pipeline.h"
#include "kiln/Target/GPUChips.h"
#include "kiln/runtime.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVM.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/UBToLLVM/UBToLLVM.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVM.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/Constants.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Triple.h"

#include <cstdlib>
#include <mutex>

namespace kd = mlir::kiln;
using namespace kiln::detail;
using mlir::DialectRegistry;
using mlir::Diagnostic;
using mlir::DiagnosticSeverity;
using mlir::IntegerType;
using mlir::MLIRContext;
using mlir::ModuleOp;
using mlir::Operation;
using mlir::OwningOpRef;
using mlir::Pass;
using mlir::PassInstrumentation;
using mlir::PassManager;
using mlir::ScopedDiagnosticHandler;
using mlir::SmallVector;
using mlir::StringAttr;
using mlir::Type;
using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;

const char *kiln::compilerVersion() { return "kiln 0.1.0"; }

namespace kiln {
const char *buildId(); // generated: a hash of the compiler's sources
} // namespace kiln

const std::string &kiln::compilerFingerprint() {
  static const std::string fingerprint =
      std::string(compilerVersion()) + " " + buildId();
  return fingerprint;
}


//===----------------------------------------------------------------------===//
// Targets
//===----------------------------------------------------------------------===//

/// `-prefer-256-bit`: skylake-avx512's tuning has LLVM use ymm for what it
/// vectorizes or expands itself (tile copies become memcpy-like ymm loops);
/// the kernels' own vectors are zmm already. With it off the copies are zmm
/// too: +2-3% on the 2048^3 f32 matmul (docs/performance.md).
static kiln::CPUTarget avx512Target() {
  return {"x86-64-avx512", "skylake-avx512",
          "+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512cd,+avx2,+fma,+f16c,"
          "-prefer-256-bit",
          512,
          {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
           "avx512dq", "avx512cd"}, {}};
}

/// AVX-512 with AVX512-BF16 (Cooper Lake, Sapphire Rapids and later, Zen 4
/// and later): bf16 dots run on vdpbf16ps, and LLVM may use the bf16
/// conversions, so its bundles need the feature.
static kiln::CPUTarget avx512BF16Target() {
  kiln::CPUTarget t = avx512Target();
  t.name = "x86-64-avx512-bf16";
  t.llvmFeatures += ",+avx512bf16";
  t.requiredFeatures.push_back("avx512bf16");
  return t;
}

static kiln::CPUTarget avx2Target() {
  return {"x86-64-avx2", "haswell", "+avx2,+fma,+f16c", 256,
          {"avx", "avx2", "fma", "f16c"}, {}};
}

static kiln::CPUTarget sseTarget() {
  return {"x86-64-sse", "x86-64-v2", "+sse4.2", 128, {"sse4.2"}, {}};
}

llvm::Expected<kiln::CPUTarget> kiln::resolveCPUTarget(llvm::StringRef name) {
  // An empty name is refused rather than read as the host: it is an unset
  // variable or option on the caller's side (JIT::compile's per-kernel
  // target is the exception, mapped to the JIT's own before this).
  if (name.empty())
    return makeError("the target is empty: give host, x86-64-avx2, sm_90a, ...");
  if (name == "host" || name == "x86-64") {
    auto has = [](const char *f) { return kiln_cpu_has_feature(f) != 0; };
    if (has("avx512f") && has("avx512bw") && has("avx512vl") &&
        has("avx512dq") && has("avx512cd") && has("fma") && has("f16c"))
      return avx512Target();
    if (has("avx2") && has("fma") && has("f16c"))
      return avx2Target();
    return sseTarget();
  }
  if (name.starts_with("emu-")) {
    // The GPU lowering for an architecture, run here by the SIMT emulator.
    auto gpu = resolveCPUTarget(name.drop_front(4));
    if (!gpu)
      return gpu.takeError();
    if (!isGPUTarget(gpu->name))
      return makeError("unknown emulation target '" + name +
                       "': use emu-sm_XY (emu-sm_80, emu-sm_90a, ...)");
    auto host = resolveCPUTarget("host");
    if (!host)
      return host.takeError();
    host->name = name.str();
    host->emulatedGPU = gpu->name;
    return host;
  }
  if (isGPUTarget(name)) {
    // A GPU target as the JIT keys it: the architecture is the "cpu".
    if (!findGPUChip(name))
      return makeError("unknown GPU target '" + name + "'; known: " + knownGPUChips());
    return kiln::CPUTarget{name.str(), name.str(), "", 0, {}, {}};
  }
  if (name == "x86-64-avx512" || name == "avx512")
    return avx512Target();
  if (name == "x86-64-avx512-bf16" || name == "avx512-bf16")
    return avx512BF16Target();
  if (name == "x86-64-avx2" || name == "avx2")
    return avx2Target();
  if (name == "x86-64-sse" || name == "sse")
    return sseTarget();
  return makeError("unknown target '" + name +
                   "'; known: host, x86-64, x86-64-avx512-bf16, x86-64-avx512, "
                   "x86-64-avx2, "
                   "x86-64-sse, " + knownGPUChips() + ", and "
                   "emu-sm_XY (the GPU lowering on the CPU emulator)");
}

//===----------------------------------------------------------------------===//
// Kernel description and C header
//===----------------------------------------------------------------------===//

void kiln::registerDialects(DialectRegistry &registry) {
  registry.insert<kd::KilnDialect, mlir::arith::ArithDialect, mlir::func::FuncDialect,
                  mlir::LLVM::LLVMDialect, mlir::math::MathDialect, mlir::memref::MemRefDialect,
                  mlir::scf::SCFDialect, mlir::tensor::TensorDialect,
                  mlir::vector::VectorDialect>();
  registry.insert<mlir::gpu::GPUDialect, mlir::nvgpu::NVGPUDialect,
                  mlir::NVVM::NVVMDialect>();
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  mlir::registerNVVMDialectTranslation(registry);
  // The *-to-LLVM interfaces convert-gpu-to-nvvm applies inside gpu.module.
  mlir::arith::registerConvertArithToLLVMInterface(registry);
  mlir::cf::registerConvertControlFlowToLLVMInterface(registry);
  mlir::registerConvertFuncToLLVMInterface(registry);
  mlir::index::registerConvertIndexToLLVMInterface(registry);
  mlir::registerConvertMathToLLVMInterface(registry);
  mlir::registerConvertMemRefToLLVMInterface(registry);
  mlir::NVVM::registerConvertGpuToNVVMInterface(registry);
  mlir::registerConvertNVVMToLLVMInterface(registry);
  mlir::ub::registerConvertUBToLLVMInterface(registry);
  // Vector ops inside gpu.modules (ldmatrix fragments, vector shared/global
  // accesses) lower in convert-gpu-to-nvvm, with its address spaces.
  mlir::vector::registerConvertVectorToLLVMInterface(registry);
}


static bool isCIdentifier(llvm::StringRef s) {
  if (s.empty() || !(std::isalpha(s[0]) || s[0] == '_'))
    return false;
  return llvm::all_of(s, [](char c) { return std::isalnum(c) || c == '_'; });
}

/// Whether the kernel may write memory through `ptr`, a pointer argument:
/// it follows the pointer into views (`kiln.make_view`) and through loops,
/// branches and selects; a store, atomic add or scatter into a view of it is
/// a write, a load or gather a read, and any other use counts as a write (the
/// safe answer: a launch then refuses read-only memory for it).
static bool mayWriteThrough(mlir::Value ptr) {
  SmallVector<mlir::Value> work{ptr};
  llvm::DenseSet<mlir::Value> seen;
  while (!work.empty()) {
    mlir::Value value = work.pop_back_val();
    if (!seen.insert(value).second)
      continue;
    for (mlir::OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (isa<kd::LoadOp, kd::GatherOp>(user))
        continue;
      if (auto view = dyn_cast<kd::MakeViewOp>(user)) {
        if (use.get() == view.getBase())
          work.push_back(view.getResult());
        continue;
      }
      if (auto select = dyn_cast<mlir::arith::SelectOp>(user)) {
        if (use.get() != select.getCondition())
          work.push_back(select.getResult());
        continue;
      }
      if (auto loop = dyn_cast<mlir::scf::ForOp>(user)) {
        if (mlir::OpResult result = loop.getTiedLoopResult(&use)) {
          work.push_back(result);
          work.push_back(loop.getTiedLoopRegionIterArg(&use));
          continue;
        }
        return true;
      }
      if (auto yield = dyn_cast<mlir::scf::YieldOp>(user)) {
        Operation *parent = yield->getParentOp();
        unsigned index = use.getOperandNumber();
        if (!isa<mlir::scf::ForOp, mlir::scf::IfOp, mlir::scf::IndexSwitchOp>(parent) ||
            index >= parent->getNumResults())
          return true;
        work.push_back(parent->getResult(index));
        if (auto loop = dyn_cast<mlir::scf::ForOp>(parent))
          work.push_back(loop.getRegionIterArgs()[index]);
        continue;
      }
      return true;
    }
  }
  return false;
}

llvm::Expected<kiln::KernelInfo> kiln::describeKernel(ModuleOp module,
                                                      llvm::StringRef name) {
  SmallVector<kd::FuncOp> kernels;
  module.walk([&](kd::FuncOp f) {
    if (!f.isExternal() && (name.empty() || f.getSymName() == name))
      kernels.push_back(f);
  });
  if (kernels.empty())
    return makeError(name.empty() ? llvm::Twine("the module has no kernel "
                                                "(kiln.func with a body)")
                                  : "no kernel named '" + name + "'");
  if (kernels.size() > 1)
    return makeError("the module has several kernels; choose one with "
                     "--kernel NAME");
  kd::FuncOp k = kernels.front();
  // (The CPU pipeline lowers the top-level module's functions: a kernel in
  // a nested module compiled to a bundle without its entry point.)
  if (k->getParentOp() != module.getOperation())
    return makeError("kernel '" + k.getSymName() +
                     "' is inside a nested module: kernels must be at the top "
                     "level of the module");
  KernelInfo info;
  info.name = k.getSymName().str();
  if (!isCIdentifier(info.name))
    return makeError("kernel name '" + info.name +
                     "' is not a C identifier (it names symbols and C "
                     "functions)");
  info.gridRank = k.getGridRank();
  for (auto [i, t] : llvm::enumerate(k.getArgumentTypes())) {
    KernelArg arg;
    arg.name = "arg" + std::to_string(i);
    // A name that is not a C identifier (a Python parameter may be α) is
    // replaced by argN, as a missing one is.
    bool named = false;
    if (auto n = k.getArgAttrOfType<StringAttr>(i, "kiln.name"))
      if (isCIdentifier(n.getValue())) {
        arg.name = n.getValue().str();
        named = true;
      }
    // One name per argument: the runtime refuses a bundle with two.
    for (const KernelArg &other : info.args)
      if (other.name == arg.name)
        return makeError("arguments of kernel '" + info.name + "' share the name '" +
                         arg.name + "'" +
                         (named ? std::string()
                                : " (argument #" + std::to_string(i) +
                                      " has no kiln.name that is a C identifier, so it "
                                      "is called arg" + std::to_string(i) + ")"));
    if (auto p = dyn_cast<kd::PtrType>(t)) {
      arg.kind = "ptr";
      arg.dtype = kd::runtimeDTypeName(p.getElementType());
      arg.written = mayWriteThrough(k.getArgument(i));
    } else {
      arg.kind = "scalar";
      arg.dtype = kd::runtimeDTypeName(t);
    }
    if (arg.dtype.empty())
      return makeError("argument #" + llvm::Twine(i) + " of kernel '" +
                       info.name + "' has a type the runtime cannot pass");
    info.args.push_back(arg);
  }
  return info;
}

static std::string cTypeOf(const kiln::KernelArg &a) {
  static const std::pair<const char *, const char *> scalars[] = {
      {"f32", "float"},    {"f64", "double"},   {"i8", "int8_t"},
      {"i16", "int16_t"},  {"i32", "int32_t"},  {"i64", "int64_t"},
      {"u8", "uint8_t"},   {"i1", "uint8_t"},   {"f16", "uint16_t"},
      {"bf16", "uint16_t"}};
  std::string base = "void";
  for (auto [k, v] : scalars)
    if (a.dtype == k)
      base = v;
  // A pointer the kernel only reads is const: callers may pass const data.
  if (a.kind == "ptr")
    return (a.written ? "" : "const ") + base + " *";
  return base;
}

static std::string dtypeEnum(llvm::StringRef dtype) {
  return ("KILN_DTYPE_" + dtype.upper());
}

/// An argument's name as a C/C++ parameter of the generated launcher:
/// itself, or with a trailing '_' where it is a keyword or one of the
/// launcher's own identifiers (parameter names do not matter to callers).
static std::string cParamName(llvm::StringRef name) {
  static const char *const reserved[] = {
      // C and C++ keywords a C identifier can spell.
      "auto", "break", "case", "char", "const", "continue", "default", "do",
      "double", "else", "enum", "extern", "float", "for", "goto", "if",
      "inline", "int", "long", "register", "restrict", "return", "short",
      "signed", "sizeof", "static", "struct", "switch", "typedef", "union",
      "unsigned", "void", "volatile", "while", "bool", "true", "false",
      "alignas", "alignof", "and", "and_eq", "asm", "bitand", "bitor", "catch",
      "class", "compl", "concept", "consteval", "constexpr", "constinit",
      "const_cast", "co_await", "co_return", "co_yield", "decltype", "delete",
      "dynamic_cast", "explicit", "export", "friend", "mutable", "namespace",
      "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq",
      "private", "protected", "public", "reinterpret_cast", "requires",
      "static_assert", "static_cast", "template", "this", "thread_local",
      "throw", "try", "typeid", "typename", "using", "virtual", "wchar_t",
      "xor", "xor_eq", "char8_t", "char16_t", "char32_t", "_Bool", "_Complex",
      "_Imaginary", "_Alignas", "_Alignof", "_Atomic", "_Generic",
      "_Noreturn", "_Static_assert", "_Thread_local",
      // What the launcher uses.
      "NULL", "memset", "strcmp", "size_t", "int64_t", "int32_t", "int16_t",
      "int8_t", "uint8_t", "uint16_t", "kiln_launch", "kiln_arg",
      "kiln_runtime", "kiln_kernel", "kiln_status", "kiln_rt_", "kiln_k_",
      "kiln_args_", "kiln_grid_", "kiln_gx_", "kiln_gy_", "kiln_gz_"};
  for (const char *r : reserved)
    if (name == r)
      return (name + "_").str();
  return name.str();
}

std::string kiln::emitCHeader(const KernelInfo &k) {
  std::string s;
  llvm::raw_string_ostream os(s);
  std::string guard = "KILN_KERNEL_" + llvm::StringRef(k.name).upper() + "_H";
  os << "/* Generated by " << compilerVersion() << " (kilnc --emit c-header)."
     << " Do not edit.\n"
     << " * Typed launcher for the kernel '" << k.name
     << "'. Needs only the Kiln runtime\n"
     << " * (runtime/include/kiln/runtime.h): no LLVM, no Python. */\n"
     << "#ifndef " << guard << "\n#define " << guard << "\n\n"
     << "#include <kiln/runtime.h>\n#include <stdint.h>\n#include <string.h>\n\n"
     << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
  os << "/* Loads the bundle at `path` and checks it holds '" << k.name
     << "' with the\n * signature this header was generated for. */\n";
  os << "static inline kiln_status kiln_load_" << k.name
     << "(const char *path, kiln_kernel **out) {\n"
     << "  static const kiln_arg_kind kinds[" << std::max<size_t>(1, k.args.size())
     << "] = {";
  for (auto [i, a] : llvm::enumerate(k.args))
    os << (i ? ", " : "") << (a.kind == "ptr" ? "KILN_ARG_PTR" : "KILN_ARG_SCALAR");
  if (k.args.empty())
    os << "KILN_ARG_PTR";
  os << "};\n  static const kiln_dtype dtypes[" << std::max<size_t>(1, k.args.size())
     << "] = {";
  for (auto [i, a] : llvm::enumerate(k.args))
    os << (i ? ", " : "") << dtypeEnum(a.dtype);
  if (k.args.empty())
    os << "KILN_DTYPE_F32";
  os << "};\n"
     << "  kiln_kernel *kernel = NULL;\n"
     << "  kiln_status st = kiln_bundle_load_file(path, &kernel);\n"
     << "  if (st) return st;\n"
     << "  int ok = strcmp(kiln_kernel_name(kernel), \"" << k.name << "\") == 0"
     << " && kiln_kernel_num_args(kernel) == " << k.args.size() << ";\n"
     << "  for (size_t i = 0; ok && i < " << k.args.size() << "; ++i) {\n"
     << "    kiln_arg_info info;\n"
     << "    kiln_status e = kiln_kernel_arg_info(kernel, i, &info);\n"
     << "    if (e) { kiln_status_free(e); ok = 0; break; }\n"
     << "    ok = info.kind == kinds[i] && info.dtype == dtypes[i];\n"
     << "  }\n"
     << "  if (!ok) {\n"
     << "    kiln_kernel_destroy(kernel);\n"
     << "    return kiln_status_create(KILN_ERROR_INVALID_ARGUMENT, \"bundle "
        "does not hold kernel '" << k.name
     << "' with the signature of this header\");\n"
     << "  }\n"
     << "  *out = kernel;\n  return NULL;\n}\n\n";
  os << "/* Launches '" << k.name << "' over the grid (gx, gy, gz). */\n";
  // (The launcher's own identifiers are kiln_-prefixed and user names that
  // would clash get a '_': an argument may be called rt, grid or int.)
  os << "static inline kiln_status kiln_launch_" << k.name
     << "(kiln_runtime *kiln_rt_, kiln_kernel *kiln_k_";
  for (const auto &a : k.args)
    os << ", " << cTypeOf(a) << (a.kind == "ptr" ? "" : " ") << cParamName(a.name);
  os << ", int64_t kiln_gx_, int64_t kiln_gy_, int64_t kiln_gz_) {\n";
  os << "  kiln_arg kiln_args_[" << std::max<size_t>(1, k.args.size()) << "];\n";
  os << "  memset(kiln_args_, 0, sizeof(kiln_args_));\n";
  for (auto [i, a] : llvm::enumerate(k.args)) {
    os << "  kiln_args_[" << i << "].kind = "
       << (a.kind == "ptr" ? "KILN_ARG_PTR" : "KILN_ARG_SCALAR") << ";\n";
    os << "  kiln_args_[" << i << "].dtype = " << dtypeEnum(a.dtype) << ";\n";
    if (a.kind == "ptr") {
      // (Through uintptr_t: the runtime's field is not const, and a cast
      // that drops const would warn under -Wcast-qual.)
      os << "  kiln_args_[" << i << "].value.ptr = (void *)"
         << (a.written ? "" : "(uintptr_t)") << cParamName(a.name) << ";\n";
    } else {
      std::string field = a.dtype;
      if (a.dtype == "f16" || a.dtype == "bf16")
        field = "bits16";
      if (a.dtype == "i1")
        field = "u8";
      os << "  kiln_args_[" << i << "].value." << field << " = " << cParamName(a.name)
         << ";\n";
    }
  }
  os << "  const int64_t kiln_grid_[3] = {kiln_gx_, kiln_gy_, kiln_gz_};\n"
     << "  return kiln_launch(kiln_rt_, kiln_k_, kiln_args_, " << k.args.size()
     << ", kiln_grid_);\n}\n\n";
  os << "#ifdef __cplusplus\n}\n#endif\n\n#endif /* " << guard << " */\n";
  return s;
}

//===----------------------------------------------------------------------===//
// Bundle writer
//===----------------------------------------------------------------------===//

static uint64_t fnv1a64(llvm::StringRef data) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string kiln::writeBundle(llvm::StringRef manifest, llvm::StringRef code,
                              int64_t scratchBytes, bool tensorMaps) {
  uint64_t codeOffset = (64 + manifest.size() + 7) / 8 * 8;
  std::string body = manifest.str();
  body.append(codeOffset - 64 - manifest.size(), '\0');
  body.append(code.data(), code.size());
  uint64_t fileSize = 64 + body.size();
  std::string out("KILNBNDL", 8);
  auto put32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i)
      out.push_back(char((v >> (8 * i)) & 0xff));
  };
  auto put64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i)
      out.push_back(char((v >> (8 * i)) & 0xff));
  };
  put32(tensorMaps ? 3 : scratchBytes > 0 ? 2 : 1);
  put32(0);
  put64(64);
  put64(manifest.size());
  put64(codeOffset);
  put64(code.size());
  put64(fnv1a64(body));
  put64(fileSize);
  out += body;
  return out;
}

//===----------------------------------------------------------------------===//
// Compilation
//===----------------------------------------------------------------------===//

static std::string formatLocation(mlir::Location loc) {
  if (auto f = mlir::dyn_cast<mlir::FileLineColLoc>(loc))
    return (f.getFilename().getValue() + ":" + llvm::Twine(f.getLine()) + ":" +
            llvm::Twine(f.getColumn()))
        .str();
  if (auto n = mlir::dyn_cast<mlir::NameLoc>(loc))
    return formatLocation(n.getChildLoc());
  if (auto c = mlir::dyn_cast<mlir::CallSiteLoc>(loc))
    return formatLocation(c.getCallee());
  if (auto f = mlir::dyn_cast<mlir::FusedLoc>(loc))
    for (mlir::Location l : f.getLocations()) {
      std::string s = formatLocation(l);
      if (!s.empty() && s != "<unknown>")
        return s;
    }
  return "<unknown>";
}

std::string kiln::formatDiagnostic(Diagnostic &d) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << formatLocation(d.getLocation()) << ": ";
  switch (d.getSeverity()) {
  case DiagnosticSeverity::Error:
    os << "error: ";
    break;
  case DiagnosticSeverity::Warning:
    os << "warning: ";
    break;
  case DiagnosticSeverity::Note:
    os << "note: ";
    break;
  case DiagnosticSeverity::Remark:
    os << "remark: ";
    break;
  }
  os << d.str() << "\n";
  for (Diagnostic &note : d.getNotes())
    os << formatDiagnostic(note);
  return text;
}


static void initializeLLVMTargets() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    // (llvm.inline_asm is assembled by the object streamer: without the
    // parser LLVM aborted the process.)
    llvm::InitializeNativeTargetAsmParser();
  });
}

static llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
createTargetMachine(const kiln::CPUTarget &target, unsigned optLevel) {
  initializeLLVMTargets();
  llvm::Triple triple("x86_64-unknown-linux-gnu");
  std::string err;
  const llvm::Target *t = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!t)
    return makeError("LLVM has no x86-64 target: " + err);
  llvm::TargetOptions opts;
  auto level = optLevel >= 3   ? llvm::CodeGenOptLevel::Aggressive
               : optLevel == 2 ? llvm::CodeGenOptLevel::Default
               : optLevel == 1 ? llvm::CodeGenOptLevel::Less
                               : llvm::CodeGenOptLevel::None;
  std::unique_ptr<llvm::TargetMachine> tm(t->createTargetMachine(
      triple, target.cpu, target.llvmFeatures, opts, llvm::Reloc::PIC_,
      std::nullopt, level));
  if (!tm)
    return makeError("could not create an LLVM target machine for " +
                     target.name);
  return tm;
}

llvm::Error kiln::detail::optimize(llvm::Module &module,
                                  llvm::TargetMachine &tm, unsigned optLevel) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::OptimizationLevel level = optLevel >= 3   ? llvm::OptimizationLevel::O3
                                  : optLevel == 2 ? llvm::OptimizationLevel::O2
                                  : optLevel == 1 ? llvm::OptimizationLevel::O1
                                                  : llvm::OptimizationLevel::O0;
  llvm::ModulePassManager mpm = level == llvm::OptimizationLevel::O0
                                    ? pb.buildO0DefaultPipeline(level)
                                    : pb.buildPerModuleDefaultPipeline(level);
  mpm.run(module, mam);
  return llvm::Error::success();
}

llvm::Expected<std::string>
kiln::detail::emitMachineCode(llvm::Module &module, llvm::TargetMachine &tm,
                              bool assembly) {
  llvm::SmallString<0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr,
                             assembly ? llvm::CodeGenFileType::AssemblyFile
                                      : llvm::CodeGenFileType::ObjectFile))
    return makeError("LLVM cannot emit code for this target");
  pm.run(module);
  return std::string(buffer.str());
}

/// The float-conversion builtins' object (Builtins/kiln_cpu_builtins.c),
/// linked into CPU and emulator bundles; empty where it is missing (a kernel
/// that calls one then fails to load, naming the symbol, as before).
static std::string cpuBuiltinsObject() {
  std::string path;
  if (const char *env = std::getenv("KILN_CPU_BUILTINS_OBJECT"); env && *env)
    path = env;
  else
    path = KILN_CPU_BUILTINS_OBJECT;
  return llvm::sys::fs::exists(path) ? path : std::string();
}

/// The SIMT emulator's object, linked into emu-sm_XY bundles.
static llvm::Expected<std::string> emulatorObject() {
  std::string path;
  if (const char *env = std::getenv("KILN_GPU_EMU_OBJECT"); env && *env)
    path = env;
  else
    path = KILN_GPU_EMU_OBJECT;
  if (!llvm::sys::fs::exists(path))
    return makeError("the GPU emulator object '" + path +
                     "' does not exist (build the kiln-gpu-emu target, or "
                     "set KILN_GPU_EMU_OBJECT)");
  return path;
}

/// Links an object into an ELF shared object with the system linker.
static llvm::Expected<std::string>
linkSharedObject(llvm::StringRef object,
                 llvm::ArrayRef<std::string> extraObjects = {}) {
  static std::string linker = [] {
    for (const char *name : {"ld.lld", "ld", "ld.bfd", "ld.gold"})
      if (auto p = llvm::sys::findProgramByName(name))
        return *p;
    return std::string();
  }();
  if (linker.empty())
    return makeError("no system linker (ld) found; install binutils");
  return runToolOnFile(
      "the linker (" + linker + ")", object, "o", "so",
      [&](llvm::StringRef in, llvm::StringRef out) {
        llvm::SmallVector<llvm::StringRef> args{
            linker, "-shared", "-z", "noexecstack", "--hash-style=gnu",
            "-o",   out,       in};
        for (const std::string &extra : extraObjects)
          args.push_back(extra);
        return args;
      },
      60);
}

std::string kiln::writesLine(const KernelInfo &kernel) {
  std::string line = "writes";
  for (const KernelArg &a : kernel.args)
    if (a.written)
      line += " " + a.name;
  return line + "\n";
}

static std::string buildManifest(const kiln::KernelInfo &k,
                                 const kiln::CPUTarget &target,
                                 int64_t scratchBytes,
                                 llvm::ArrayRef<std::string> tensorMaps) {
  std::string m;
  llvm::raw_string_ostream os(m);
  os << "kiln-bundle 1\n"
     << "name " << k.name << "\n"
     << "entry kiln_entry_" << k.name << "\n"
     << "target x86-64\n";
  os << "features";
  for (const auto &f : target.requiredFeatures)
    os << " " << f;
  os << "\n";
  os << "code elf-shared-object\n"
     << "compiler " << kiln::compilerVersion() << "\n"
     << "grid-rank " << k.gridRank << "\n"
     << "launch cpu-target " << target.name << "\n";
  // Emulated sm_90a kernels build TMA tensor maps in a per-program scratch
  // the runtime passes as a hidden last argument.
  if (scratchBytes)
    os << "launch scratch_bytes " << scratchBytes << "\n";
  for (const auto &a : k.args)
    os << "arg " << a.name << " " << a.kind << " " << a.dtype << "\n";
  os << writesLine(k);
  // ... and take the tensor maps the runtime encodes at launch (with the
  // emulator's encoder) after it.
  for (const std::string &t : tensorMaps)
    os << "tensor_map " << t << "\n";
  return m;
}

bool kiln::isGPUTarget(llvm::StringRef name) {
  return name.starts_with("sm_");
}

/// The element type of a tile, view or pointer (else the type itself).
static Type elementOf(Type t) {
  if (auto p = dyn_cast<kd::PtrType>(t))
    return p.getElementType();
  if (auto v = dyn_cast<kd::ViewType>(t))
    return v.getElementType();
  return getElementTypeOrSelf(t);
}

/// An op of the input that only another target's backend can lower (NVVM
/// on a CPU, an x86 intrinsic on a GPU), or with element types no lowering
/// takes, refused with its location: LLVM's instruction selection aborted
/// the process, and the element types failed deep in the lowering with an
/// internal message (ui8: "integer return type must be signless") or none
/// (an f8 scan: "LLVM Translation failed" at <unknown>).
static llvm::Error checkOpsForTarget(ModuleOp module, bool gpu,
                                     llvm::StringRef target) {
  std::string error, detail;
  module.walk([&](Operation *op) {
    llvm::StringRef what;
    mlir::Dialect *dialect = op->getDialect();
    auto types = llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes());
    auto signedInt = llvm::find_if(types, [](Type t) {
      auto i = dyn_cast<IntegerType>(elementOf(t));
      return i && !i.isSignless();
    });
    Type scanned = isa<kd::ReduceOp, kd::ScanOp>(op) ? elementOf(op->getOperand(0).getType())
                                                     : Type();
    if (signedInt != types.end()) {
      what = "an op on signed or unsigned integers";
      llvm::raw_string_ostream(detail)
          << " (" << elementOf(*signedInt)
          << "): kiln integers are signless (iN), the ops carry the sign";
    } else if (scanned && isa<mlir::FloatType>(scanned) &&
               cast<mlir::FloatType>(scanned).getWidth() == 8) {
      what = "a reduction or scan of 8-bit floats";
      detail = ": extend the tile to f16 or f32 first (arith.extf)";
    } else if (!gpu && dialect &&
        (isa<mlir::NVVM::NVVMDialect>(dialect) || dialect->getNamespace() == "nvgpu"))
      what = "an NVIDIA GPU op";
    else if (auto intr = dyn_cast<mlir::LLVM::CallIntrinsicOp>(op)) {
      // (Target-independent intrinsics, llvm.fma.f32, are fine anywhere.)
      static const char *const prefixes[] = {"llvm.x86.", "llvm.nvvm.", "llvm.aarch64.",
                                             "llvm.arm.", "llvm.amdgcn."};
      llvm::StringRef native = gpu ? "llvm.nvvm." : "llvm.x86.";
      for (llvm::StringRef prefix : prefixes)
        if (intr.getIntrin().starts_with(prefix) && prefix != native)
          what = "an intrinsic of another target";
    }
    if (what.empty())
      return mlir::WalkResult::advance();
    llvm::raw_string_ostream os(error);
    os << formatLocation(op->getLoc()) << ": error: '" << op->getName() << "' is " << what
       << ", which the " << target << " target cannot compile" << detail;
    return mlir::WalkResult::interrupt();
  });
  return error.empty() ? llvm::Error::success() : makeError(error);
}

llvm::Expected<kiln::CompileResult>
kiln::compileModule(ModuleOp module, const CompileOptions &options,
                    EmitKind emit) {
  if (isGPUTarget(options.target)) {
    auto info = describeKernel(module, options.kernel);
    if (!info)
      return info.takeError();
    if (llvm::Error e = checkOpsForTarget(module, /*gpu=*/true, options.target))
      return std::move(e);
    return compileModuleGPU(module, options, emit, *info);
  }
  auto target = resolveCPUTarget(options.target);
  if (!target)
    return target.takeError();
  if (target->emulatedGPU.empty())
    if (llvm::Error e = checkOpsForTarget(module, /*gpu=*/false, target->name))
      return std::move(e);
  auto info = describeKernel(module, options.kernel);
  if (!info)
    return info.takeError();
  CompileResult result;
  result.kernel = *info;
  result.target = *target;
  if (emit == EmitKind::CHeader) {
    result.bytes = emitCHeader(*info);
    return result;
  }
  // Keep only the chosen kernel.
  SmallVector<kd::FuncOp> others;
  module.walk([&](kd::FuncOp f) {
    if (f.getSymName() != info->name)
      others.push_back(f);
  });
  for (auto f : others)
    f.erase();

  MLIRContext *ctx = module.getContext();
  DiagnosticCollector diags(ctx);
  bool dump = options.dumpIR || dumpIRFromEnv();
  PassManager pm(ctx);
  std::string failedPass;
  pm.addInstrumentation(std::make_unique<FailedPassRecorder>(&failedPass));
  if (dump) {
    ctx->disableMultithreading();
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](Pass *, Operation *) { return false; },
        /*shouldPrintAfterPass=*/[](Pass *, Operation *) { return true; },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
        /*printAfterOnlyOnFailure=*/false, llvm::errs());
  }
  if (target->emulatedGPU.empty()) {
    kd::CPUPipelineOptions pipelineOptions;
    pipelineOptions.vectorBits = target->vectorBits;
    pipelineOptions.bf16Dot =
        llvm::is_contained(target->requiredFeatures, "avx512bf16");
    kd::buildCPUPipeline(pm, pipelineOptions);
  } else {
    kd::GPUEmulationPipelineOptions pipelineOptions;
    pipelineOptions.chip = target->emulatedGPU;
    pipelineOptions.numWarps = options.numWarps;
    pipelineOptions.numStages = options.numStages;
    pipelineOptions.tma = options.tma;
    pipelineOptions.swizzle = options.swizzle;
    pipelineOptions.overlap = options.overlap;
    pipelineOptions.hostMaps = options.hostMaps;
    pipelineOptions.pipelineGathers = options.pipelineGathers;
    pipelineOptions.fp8Wgmma = options.fp8Wgmma;
    pipelineOptions.pingpong = options.pingpong;
    kd::buildGPUEmulationPipeline(pm, pipelineOptions);
  }
  if (mlir::failed(pm.run(module))) {
    std::string where =
        failedPass.empty() ? std::string() : " in pass '" + failedPass + "'";
    return makeError("kernel '" + info->name + "' failed to compile" + where +
                     ":\n" + diags.text);
  }
  if (emit == EmitKind::MLIR) {
    llvm::raw_string_ostream os(result.bytes);
    module.print(os);
    return result;
  }

  int64_t scratchBytes = 0;
  if (auto attr = module->getAttrOfType<mlir::IntegerAttr>(
          "kiln.scratch_bytes." + info->name))
    scratchBytes = attr.getInt();
  llvm::SmallVector<std::string> tensorMaps;
  if (auto a = module->getAttrOfType<mlir::ArrayAttr>("kiln.tensor_maps." +
                                                      info->name))
    for (mlir::Attribute s : a)
      tensorMaps.push_back(llvm::cast<mlir::StringAttr>(s).str());
  std::string manifest =
      buildManifest(*info, *target, scratchBytes, tensorMaps);

  llvm::LLVMContext llvmContext;
  auto llvmModule = mlir::translateModuleToLLVMIR(module, llvmContext, info->name);
  if (!llvmModule)
    return makeError("kernel '" + info->name +
                     "': translation to LLVM IR failed:\n" + diags.text);
  // The code carries the manifest it was compiled for (exported, read-only,
  // NUL-terminated), so the runtime refuses a bundle whose manifest was
  // edited after compiling: an argument kind, a dtype, a feature or the
  // scratch size that disagrees with the code would crash it, or worse
  // (docs/bundle-format.md, "Code (CPU targets)").
  auto *manifestData = llvm::ConstantDataArray::getString(
      llvmContext, manifest, /*AddNull=*/true);
  auto *manifestGlobal = new llvm::GlobalVariable(
      *llvmModule, manifestData->getType(), /*isConstant=*/true,
      llvm::GlobalValue::ExternalLinkage, manifestData, "kiln_manifest");
  manifestGlobal->setVisibility(llvm::GlobalValue::DefaultVisibility);
  auto tm = createTargetMachine(*target, options.optLevel);
  if (!tm)
    return tm.takeError();
  llvmModule->setDataLayout((*tm)->createDataLayout());
  llvmModule->setTargetTriple((*tm)->getTargetTriple());
  // Only the launch entry is exported; the body is inlined into it.
  for (llvm::Function &f : *llvmModule) {
    if (f.isDeclaration())
      continue;
    if (f.getName().starts_with("kiln_entry_")) {
      f.setVisibility(llvm::GlobalValue::DefaultVisibility);
      f.addFnAttr(llvm::Attribute::NoUnwind);
    } else {
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
    }
  }
  if (dump)
    llvm::errs() << "// -----// LLVM IR before optimization //----- //\n"
                 << *llvmModule;
  if (auto err = optimize(*llvmModule, **tm, options.optLevel))
    return std::move(err);
  if (dump)
    llvm::errs() << "// -----// LLVM IR after optimization //----- //\n"
                 << *llvmModule;
  if (emit == EmitKind::LLVM) {
    llvm::raw_string_ostream os(result.bytes);
    llvmModule->print(os, nullptr);
    return result;
  }
  auto code = emitMachineCode(*llvmModule, **tm, emit == EmitKind::Asm);
  if (!code)
    return code.takeError();
  if (emit == EmitKind::Asm || emit == EmitKind::Obj) {
    result.bytes = std::move(*code);
    return result;
  }
  llvm::SmallVector<std::string, 2> extraObjects;
  if (!target->emulatedGPU.empty()) {
    auto path = emulatorObject();
    if (!path)
      return path.takeError();
    extraObjects.push_back(*path);
  }
  // The float conversions LLVM may call (a few hundred bytes of code).
  if (std::string builtins = cpuBuiltinsObject(); !builtins.empty())
    extraObjects.push_back(builtins);
  auto so = linkSharedObject(*code, extraObjects);
  if (!so)
    return so.takeError();
  result.bytes =
      writeBundle(manifest, *so, scratchBytes, !tensorMaps.empty());
  return result;
}

llvm::Error kiln::checkSourceNesting(llvm::StringRef source,
                                     llvm::StringRef bufferName) {
  // The open brackets (a '>' closes only a '<': '>=' in an integer set does
  // not lower the count), and the current run of unary minus signs (each
  // one a level of the affine parser's recursion, with no bracket).
  std::string open;
  unsigned minuses = 0, line = 1;
  size_t lineStart = 0;
  auto tooDeep = [&](size_t i) {
    return makeError(bufferName + ":" + llvm::Twine(line) + ":" +
                     llvm::Twine(i - lineStart + 1) +
                     ": error: the IR nests brackets and regions deeper than " +
                     llvm::Twine(kMaxSourceNesting) +
                     " levels (the parser would run out of stack)");
  };
  for (size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    if (c == '-' && i + 1 < source.size() && source[i + 1] == '>') {
      ++i; // '->', an arrow
      minuses = 0;
      continue;
    }
    if (c == '-') {
      if (++minuses > kMaxSourceNesting)
        return tooDeep(i);
      continue;
    }
    if (c != ' ' && c != '\t' && c != '\n')
      minuses = 0;
    if (c == '\n') {
      ++line;
      lineStart = i + 1;
    } else if (c == '"') {
      // A string literal (escapes included); it cannot span lines.
      for (++i; i < source.size() && source[i] != '"' && source[i] != '\n'; ++i)
        if (source[i] == '\\')
          ++i;
      if (i < source.size() && source[i] == '\n')
        --i;
    } else if (c == '/' && i + 1 < source.size() && source[i + 1] == '/') {
      while (i + 1 < source.size() && source[i + 1] != '\n')
        ++i;
    } else if (c == '(' || c == '[' || c == '{' || c == '<') {
      open.push_back(c);
      if (open.size() > kMaxSourceNesting)
        return tooDeep(i);
    } else if (c == '>') {
      if (!open.empty() && open.back() == '<')
        open.pop_back();
    } else if (c == ')' || c == ']' || c == '}') {
      // Closes its opener and any '<' left open inside it (a comparison);
      // a closer with no opener is the parser's error to report.
      char opener = c == ')' ? '(' : c == ']' ? '[' : '{';
      size_t at = open.find_last_of(opener);
      if (at != std::string::npos)
        open.resize(at);
    }
  }
  return llvm::Error::success();
}

llvm::Expected<kiln::CompileResult>
kiln::compileSource(MLIRContext &context, llvm::StringRef source,
                    llvm::StringRef bufferName, const CompileOptions &options,
                    EmitKind emit) {
  if (llvm::Error e = checkSourceNesting(source, bufferName))
    return std::move(e);
  DiagnosticCollector diags(&context);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source, bufferName), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = mlir::parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return makeError(diags.text.empty() ? "cannot parse " + bufferName
                                        : llvm::Twine(diags.text));
  return compileModule(*module, options, emit);
}
