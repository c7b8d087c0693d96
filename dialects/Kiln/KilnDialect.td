//===- KilnDialect.td - The kiln tile dialect --------------*- tablegen -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_TD
#define KILN_DIALECT_TD

include "mlir/IR/OpBase.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let cppNamespace = "::mlir::kiln";
  let summary = "A tile-oriented dialect for writing compute kernels";
  let description = [{
    The `kiln` dialect describes a compute kernel as a program over *tiles*:
    small, statically shaped blocks of a tensor, held as ranked `tensor`
    values. Elementwise math on tiles uses the upstream `arith` and `math`
    dialects; control flow uses `scf`. The `kiln` ops add what those dialects
    lack for kernels:

    * a launch grid (`kiln.program_id`, `kiln.num_programs`): one kernel body
      runs once per program id of a 1-3D grid;
    * memory access at tile granularity through *views*
      (`kiln.make_view`, `kiln.load`, `kiln.store`, `kiln.atomic_add`): a view is
      a base `!kiln.ptr` with a runtime shape and strides, and accesses outside
      the shape read a padding value or are dropped, so one compiled kernel
      serves every problem size;
    * index-driven access (`kiln.gather`, `kiln.scatter`) for embeddings, paged
      KV caches, MoE routing and token-sparse attention;
    * tile algebra (`kiln.dot`, `kiln.reduce`, `kiln.broadcast`,
      `kiln.expand_dims`, `kiln.reshape`, `kiln.trans`, `kiln.arange`,
      `kiln.splat`).

    Targets lower the dialect to native code; see docs/architecture.md.
  }];
  let useDefaultTypePrinterParser = 1;
  let hasConstantMaterializer = 1;
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

class Kiln_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kiln_Dialect, mnemonic, traits>;

#endif // KILN_DIALECT_TD
