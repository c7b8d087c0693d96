//===- KilnTypes.td - Types of the kiln dialect ------------*- tablegen -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TYPES_TD
#define KILN_TYPES_TD

include "KilnDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinTypeInterfaces.td"

class Kiln_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Kiln_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Kiln_PtrType : Kiln_Type<"Ptr", "ptr"> {
  let summary = "A pointer to global memory holding elements of one type";
  let description = [{
    A raw, untyped-offset pointer to memory holding elements of `elementType`.
    Kernel arguments that point at tensors have this type; `kiln.make_view`
    turns one into a view with a shape and strides.

    ```mlir
    !kiln.ptr<f32>
    !kiln.ptr<bf16>
    ```
  }];
  let parameters = (ins "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $elementType `>`";
  let genVerifyDecl = 1;
}

def Kiln_ViewType : Kiln_Type<"View", "view"> {
  let summary = "A strided, runtime-shaped window on memory";
  let description = [{
    A view of rank `rank` over elements of `elementType`: a base pointer plus
    `rank` runtime sizes and `rank` runtime strides (in elements), built by
    `kiln.make_view`. Tiles are loaded from and stored to views at element
    offsets; elements outside `[0, size)` in any dimension are masked. The
    sizes being runtime values is what lets one compiled kernel serve every
    problem shape.

    ```mlir
    !kiln.view<2xf32>   // a matrix of f32 with runtime shape and strides
    !kiln.view<1xi32>   // a vector of i32
    ```
  }];
  let parameters = (ins "unsigned":$rank, "::mlir::Type":$elementType);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // KILN_TYPES_TD
