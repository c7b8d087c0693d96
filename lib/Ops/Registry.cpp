//===- Registry.cpp - Operator registry, configurations, block masks -------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "kiln/Ops/Ops.h"
#include "OpDefs.h"

#include "kiln/Target/CPU/Compiler.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Parser/Parser.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"


#include <cerrno>
#include <cstdlib>

namespace kiln::ops {

static llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

int64_t Config::getInt(const std::string &name) const {
  return std::stoll(values.at(name));
}
double Config::getFloat(const std::string &name) const {
  // (strtod, not stod: makeConfig checked the value, and stod throws on
  // values that round to 0 or infinity.)
  return std::strtod(values.at(name).c_str(), nullptr);
}
const std::string &Config::getString(const std::string &name) const {
  return values.at(name);
}

mlir::Operation *Config::lookupMod(llvm::StringRef name) const {
  if (!mods)
    return nullptr;
  mlir::ModuleOp m = mods;
  return mlir::SymbolTable::lookupSymbolIn(m.getOperation(), name);
}

llvm::Expected<llvm::SmallVector<mlir::Value>>
inlineFunction(KernelBuilder &k, mlir::Operation *op, mlir::ValueRange args) {
  auto fn = llvm::dyn_cast<mlir::func::FuncOp>(op);
  if (!fn || fn.getBody().getBlocks().size() != 1)
    return err("a fused function must be a func.func with one block");
  if (fn.getNumArguments() != args.size())
    return err("fused function '" + fn.getSymName() + "' takes " +
               llvm::Twine(fn.getNumArguments()) + " arguments, the kernel passes " +
               llvm::Twine(args.size()));
  mlir::IRMapping map;
  for (auto [a, v] : llvm::zip(fn.getArguments(), args)) {
    if (a.getType() != v.getType()) {
      std::string want, got;
      llvm::raw_string_ostream(want) << v.getType();
      llvm::raw_string_ostream(got) << a.getType();
      return err("fused function '" + fn.getSymName() + "': argument #" +
                 llvm::Twine(a.getArgNumber()) + " has type " + got +
                 ", the kernel passes " + want);
    }
    map.map(a, v);
  }
  mlir::Block &body = fn.getBody().front();
  for (mlir::Operation &o : body.without_terminator())
    k.builder().clone(o, map);
  llvm::SmallVector<mlir::Value> results;
  for (mlir::Value r : body.getTerminator()->getOperands())
    results.push_back(map.lookupOrDefault(r));
  return results;
}

const std::vector<OpInfo> &registry() {
  static const std::vector<OpInfo> ops = [] {
    std::vector<OpInfo> all;
    for (auto *add : {registerGatherOps, registerAttentionOps, registerDSAOps,
                      registerConvOps})
      add(all);
    return all;
  }();
  return ops;
}

const OpInfo *lookup(llvm::StringRef name) {
  for (const OpInfo &op : registry())
    if (op.name == name)
      return &op;
  return nullptr;
}

llvm::Expected<Config>
makeConfig(const OpInfo &op,
                      const std::map<std::string, std::string> &given) {
  Config c;
  for (const auto &entry : given) {
    const std::string &k = entry.first, &v = entry.second;
    if (llvm::StringRef(k).starts_with("static.")) {
      int64_t x;
      if (llvm::StringRef(v).getAsInteger(10, x))
        return err("'" + k + "' must be an integer, got '" + v + "'");
      c.statics[k.substr(7)] = x;
      continue;
    }
    auto it = llvm::find_if(op.params, [&](const Param &p) { return p.name == k; });
    if (it == op.params.end()) {
      std::string known;
      for (const Param &p : op.params)
        known += (known.empty() ? "" : ", ") + p.name;
      return err("operator '" + op.name + "' has no parameter '" + k +
                 "' (parameters: " + known + ")");
    }
    if (it->kind == Param::Int) {
      int64_t x;
      if (llvm::StringRef(v).getAsInteger(10, x))
        return err("parameter '" + k + "' of '" + op.name +
                   "' must be an integer, got '" + v + "'");
      // Tile sizes, dimensions, kernel sizes, strides and dilations: a 0 or
      // negative one would build empty tiles (an internal IR error) or, in
      // a grid, divide by zero. (block_kv 0 means "as block"; window and
      // prefix are checked by attention itself.) Paddings are
      // >= 0 and switches 0 or 1.
      llvm::StringRef name(k);
      bool size = (name.starts_with("block") && !(name == "block_kv" && x == 0)) ||
                  name.ends_with("_block") ||
                  llvm::is_contained({"head_dim", "d_qk", "d_v", "index_dim",
                                      "index_heads", "gqa_group", "k", "kt", "kh",
                                      "kw", "st", "sh", "sw", "dt", "dh", "dw",
                                      "groups"},
                                     name);
      // (Kernels compute pixel and row indices in i32: a kernel size, stride
      // or padding of 2^32 + 1 was taken as 1.)
      if (x <= -(int64_t(1) << 31) || x >= (int64_t(1) << 31))
        return err("parameter '" + k + "' of '" + op.name +
                   "' must lie within (-2^31, 2^31), got " + v);
      if (size && x < 1)
        return err("parameter '" + k + "' of '" + op.name +
                   "' must be positive, got " + v);
      if (llvm::is_contained({"pt", "ph", "pw"}, name) && x < 0)
        return err("parameter '" + k + "' of '" + op.name +
                   "' must be >= 0, got " + v);
      if (llvm::is_contained({"causal", "overlap", "bias", "streaming", "one_loop", "profile",
                              "wide_taps", "row_taps", "pack_gqa"},
                             name) &&
          x != 0 && x != 1)
        return err("parameter '" + k + "' of '" + op.name +
                   "' must be 0 or 1, got " + v);
    } else if (it->kind == Param::Float) {
      double x;
      if (llvm::StringRef(v).getAsDouble(x, /*AllowInexact=*/true))
        return err("parameter '" + k + "' of '" + op.name +
                   "' must be a number, got '" + v + "'");
      // Past double's range (1e400) or below it (1e-400): refused rather
      // than read as infinity or zero ("inf" and "nan" are the operator's
      // to judge).
      errno = 0;
      (void)std::strtod(v.c_str(), nullptr);
      if (errno == ERANGE)
        return err("parameter '" + k + "' of '" + op.name +
                   "' is out of range, got '" + v + "'");
    } else if (!it->choices.empty() && !llvm::is_contained(it->choices, v)) {
      return err("parameter '" + k + "' of '" + op.name + "' must be one of " +
                 llvm::join(it->choices, ", ") + "; got '" + v + "'");
    }
    c.values[k] = v;
  }
  for (const Param &p : op.params) {
    if (c.values.count(p.name))
      continue;
    if (p.defaultValue.empty())
      return err("operator '" + op.name + "' needs --" + p.name + " (" +
                 p.help + ")");
    c.values[p.name] = p.defaultValue;
  }
  return c;
}

llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildOp(mlir::MLIRContext &context, llvm::StringRef name,
        const std::map<std::string, std::string> &given,
        llvm::StringRef modsSource) {
  const OpInfo *op = lookup(name);
  if (!op) {
    std::string known;
    for (const OpInfo &o : registry())
      known += (known.empty() ? "" : ", ") + o.name;
    return err("no operator named '" + name + "' (operators: " + known + ")");
  }
  auto config = makeConfig(*op, given);
  if (!config)
    return config.takeError();
  context.loadDialect<mlir::kiln::KilnDialect>();
  mlir::DialectRegistry registry;
  ::kiln::registerDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  std::string diag;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diag += ::kiln::formatDiagnostic(d);
    return mlir::success();
  });
  // User functions to fuse (built by the Python front end, or written by
  // hand), parsed into their own module.
  mlir::OwningOpRef<mlir::ModuleOp> mods;
  if (!modsSource.empty()) {
    if (llvm::Error e = ::kiln::checkSourceNesting(modsSource, ("functions to fuse into '" + name + "'").str()))
      return err(llvm::toString(std::move(e)));
    mods = mlir::parseSourceString<mlir::ModuleOp>(modsSource, &context);
    if (!mods)
      return err("cannot parse the functions to fuse into '" + name + "':\n" + diag);
    config->mods = *mods;
  }
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::ModuleOp::create(mlir::UnknownLoc::get(&context));
  if (auto e = op->build(*module, *config))
    return std::move(e);
  // Every static.NAME must name an integer argument of the kernel.
  for (const auto &[sname, value] : config->statics) {
    bool found = false;
    module->walk([&, sname = sname](mlir::kiln::FuncOp f) {
      for (unsigned i = 0; i < f.getNumArguments(); ++i)
        if (auto n = f.getArgAttrOfType<mlir::StringAttr>(i, "kiln.name"))
          if (n.getValue() == sname &&
              llvm::isa<mlir::IntegerType, mlir::IndexType>(f.getArgument(i).getType()))
            found = true;
    });
    if (!found)
      return err("static." + sname + ": '" + name +
                 "' has no integer argument named '" + sname + "'");
  }
  if (mlir::failed(mlir::verify(*module)))
    return err("operator '" + name + "' built an invalid kernel:\n" + diag);
  return module;
}

llvm::Expected<std::string>
buildOpSource(llvm::StringRef name,
              const std::map<std::string, std::string> &config,
              llvm::StringRef modsSource) {
  mlir::MLIRContext context;
  auto module = buildOp(context, name, config, modsSource);
  if (!module)
    return module.takeError();
  std::string s;
  llvm::raw_string_ostream os(s);
  (*module)->print(os);
  return s;
}

llvm::Expected<BlockMask> makeBlockMask(int64_t batchHeads, int64_t seqQ, int64_t seqKV,
                                        int64_t blockQ, int64_t blockKV,
                                        const Visible &visible) {
  if (blockKV == 0)
    blockKV = blockQ;
  if (batchHeads < 0 || seqQ < 0 || seqKV < 0 || blockQ < 1 || blockKV < 1)
    return err("makeBlockMask: sizes must be >= 0 and blocks >= 1, got batchHeads " +
               llvm::Twine(batchHeads) + ", seqQ " + llvm::Twine(seqQ) + ", seqKV " +
               llvm::Twine(seqKV) + ", blocks " + llvm::Twine(blockQ) + " x " +
               llvm::Twine(blockKV));
  BlockMask m;
  m.numQBlocks = seqQ / blockQ + (seqQ % blockQ != 0);
  int64_t nkb = seqKV / blockKV + (seqKV % blockKV != 0);
  m.maxBlocks = std::max<int64_t>(nkb, 1);
  // (The lists' sizes, checked before allocating: an overflowed product
  // allocated too little and the loop wrote past it.)
  int64_t lists = 0, entries = 0;
  if (__builtin_mul_overflow(batchHeads, m.numQBlocks, &lists) ||
      __builtin_mul_overflow(lists, m.maxBlocks, &entries) || entries > INT32_MAX)
    return err("makeBlockMask: " + llvm::Twine(batchHeads) + " heads x " +
               llvm::Twine(m.numQBlocks) + " query blocks x " + llvm::Twine(m.maxBlocks) +
               " key blocks is past 2^31 list entries");
  m.kvNum.assign(lists, 0);
  m.fullNum.assign(lists, 0);
  m.kvIdx.assign(entries, -1);
  m.fullIdx.assign(entries, -1);
  for (int64_t bh = 0; bh < batchHeads; ++bh)
    for (int64_t qb = 0; qb < m.numQBlocks; ++qb) {
      int64_t row = bh * m.numQBlocks + qb;
      for (int64_t kb = 0; kb < nkb; ++kb) {
        int64_t seen = 0, total = 0;
        for (int64_t q = qb * blockQ; q < std::min(seqQ, (qb + 1) * blockQ); ++q)
          for (int64_t k = kb * blockKV; k < std::min(seqKV, (kb + 1) * blockKV);
               ++k) {
            ++total;
            seen += visible(bh, q, k) ? 1 : 0;
          }
        if (seen == 0)
          continue;
        // A block that is cut by the sequence end still needs the key mask,
        // which the kernel applies in the partial loop only.
        bool full = seen == total && (kb + 1) * blockKV <= seqKV;
        if (full)
          m.fullIdx[row * m.maxBlocks + m.fullNum[row]++] = int32_t(kb);
        else
          m.kvIdx[row * m.maxBlocks + m.kvNum[row]++] = int32_t(kb);
      }
    }
  return m;
}

} // namespace kiln::ops
