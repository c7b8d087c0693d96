//===- DialectTest.cpp - Unit tests of the kiln dialect's C++ API ----------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/Kiln.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <catch2/catch.hpp>

using namespace mlir;

namespace {
struct Fixture {
  MLIRContext ctx;
  Fixture() {
    ctx.loadDialect<kiln::KilnDialect, arith::ArithDialect, func::FuncDialect,
                    scf::SCFDialect>();
  }
};

/// Collects diagnostics instead of printing them.
struct Capture {
  std::string text;
  ScopedDiagnosticHandler handler;
  explicit Capture(MLIRContext &ctx)
      : handler(&ctx, [this](Diagnostic &d) {
          text += d.str() + "\n";
          return success();
        }) {}
};
} // namespace

TEST_CASE("types are uniqued and print in their documented form", "[types]") {
  Fixture f;
  Type f32 = Float32Type::get(&f.ctx);
  auto ptr = kiln::PtrType::get(&f.ctx, f32);
  auto view = kiln::ViewType::get(&f.ctx, 2u, f32);
  CHECK(ptr == kiln::PtrType::get(&f.ctx, f32));
  std::string s;
  llvm::raw_string_ostream os(s);
  os << ptr << " " << view;
  CHECK(os.str() == "!kiln.ptr<f32> !kiln.view<2xf32>");
}

TEST_CASE("getChecked reports an invalid view rank", "[types]") {
  Fixture f;
  Capture cap(f.ctx);
  auto loc = UnknownLoc::get(&f.ctx);
  auto view = kiln::ViewType::getChecked([&] { return emitError(loc); },
                                         &f.ctx, 0u, Type(Float32Type::get(&f.ctx)));
  CHECK(!view);
  CHECK(cap.text.find("view rank must be between 1 and 8") != std::string::npos);
}

TEST_CASE("a kernel built through the C++ API verifies", "[builder]") {
  Fixture f;
  OpBuilder b(&f.ctx);
  auto loc = b.getUnknownLoc();
  auto module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module.getBody());
  Type f32 = b.getF32Type();
  auto ptr = kiln::PtrType::get(&f.ctx, f32);
  auto fn = kiln::FuncOp::create(b, loc, "scale",
                                 b.getFunctionType({ptr, b.getIndexType()}, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  auto tile = RankedTensorType::get({64}, f32);
  auto view = kiln::ViewType::get(&f.ctx, 1u, f32);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value v = kiln::MakeViewOp::create(b, loc, view, entry->getArgument(0),
                                     ValueRange{entry->getArgument(1)},
                                     ValueRange{one});
  Value pid = kiln::ProgramIdOp::create(b, loc, kiln::Axis::x);
  Value off = arith::IndexCastOp::create(b, loc, b.getIndexType(), pid);
  Value t = kiln::LoadOp::create(b, loc, tile, v, ValueRange{off},
                                 /*padding=*/nullptr, /*in_bounds=*/nullptr);
  Value two = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(2.0f));
  Value s = kiln::SplatOp::create(b, loc, tile, two);
  Value m = arith::MulFOp::create(b, loc, t, s);
  kiln::StoreOp::create(b, loc, m, v, ValueRange{off}, nullptr);
  kiln::ReturnOp::create(b, loc);
  CHECK(succeeded(verify(module)));
  CHECK(fn.getGridRank() == 1u);
  module->erase();
}

TEST_CASE("verifier messages state the broken rule", "[verifier]") {
  Fixture f;
  Capture cap(f.ctx);
  const char *src = R"mlir(
    func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %c: tensor<4x8xf32>) {
      %d = kiln.dot %a, %b, %c : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
      return
    })mlir";
  OwningOpRef<ModuleOp> m = parseSourceString<ModuleOp>(src, &f.ctx);
  CHECK(!m);
  CHECK(cap.text.find("contraction dimension of lhs (8) must equal the "
                      "leading dimension of rhs (4)") != std::string::npos);
}

TEST_CASE("folders simplify shape ops", "[folding]") {
  Fixture f;
  const char *src = R"mlir(
    func.func @f(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
      %t = kiln.trans %a [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
      %u = kiln.trans %t [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
      return %u : tensor<8x4xf32>
    })mlir";
  OwningOpRef<ModuleOp> m = parseSourceString<ModuleOp>(src, &f.ctx);
  REQUIRE(m);
  kiln::TransOp outer;
  m->walk([&](kiln::TransOp op) {
    if (op.getResult().getType().getDimSize(0) == 8)
      outer = op;
  });
  REQUIRE(outer);
  SmallVector<OpFoldResult> results;
  REQUIRE(succeeded(outer->fold(results)));
  REQUIRE(results.size() == 1);
  auto folded = dyn_cast<Value>(results[0]);
  REQUIRE(folded);
  CHECK(isa<BlockArgument>(folded));
}
