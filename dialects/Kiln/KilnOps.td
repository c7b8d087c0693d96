//===- KilnOps.td - Operations of the kiln dialect ---------*- tablegen -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef KILN_OPS_TD
#define KILN_OPS_TD

include "KilnDialect.td"
include "KilnTypes.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/CallInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/FunctionInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints and enums
//===----------------------------------------------------------------------===//

def Kiln_Tile : StaticShapeTensorOf<[AnyType]>;
def Kiln_IntTile : StaticShapeTensorOf<[AnySignlessInteger]>;
def Kiln_TileOrScalar : AnyTypeOf<[Kiln_Tile, AnyType]>;

def Kiln_Axis : I32EnumAttr<"Axis", "an axis of the launch grid", [
    I32EnumAttrCase<"x", 0>, I32EnumAttrCase<"y", 1>, I32EnumAttrCase<"z", 2>]> {
  let cppNamespace = "::mlir::kiln";
}

def Kiln_ReduceKind : I32EnumAttr<"ReduceKind", "a reduction combiner", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"max", 1>,
    I32EnumAttrCase<"min", 2>, I32EnumAttrCase<"argmax", 3>,
    I32EnumAttrCase<"argmin", 4>, I32EnumAttrCase<"prod", 5>]> {
  let cppNamespace = "::mlir::kiln";
}

def Kiln_AtomicKind : I32EnumAttr<"AtomicKind", "an atomic read-modify-write", [
    I32EnumAttrCase<"add", 0>, I32EnumAttrCase<"max", 1>,
    I32EnumAttrCase<"min", 2>, I32EnumAttrCase<"xchg", 3>,
    I32EnumAttrCase<"bit_and", 4, "and">, I32EnumAttrCase<"bit_or", 5, "or">,
    I32EnumAttrCase<"bit_xor", 6, "xor">]> {
  let cppNamespace = "::mlir::kiln";
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

def Kiln_FuncOp : Kiln_Op<"func", [
    AutomaticAllocationScope, FunctionOpInterface, IsolatedFromAbove]> {
  let summary = "A kernel: one body run once per program id of a launch grid";
  let description = [{
    Defines a kernel. Its arguments are `!kiln.ptr` values (memory) and
    scalars (integers and floats); a kernel returns no values. At launch the
    body runs once for every program id of a 1-3D grid; `kiln.program_id` and
    `kiln.num_programs` read the grid. The optional `grid_rank` attribute
    (1-3, default 1) says how many grid axes a launch provides.

    A `kiln.func` without a body declares an external kernel.

    ```mlir
    kiln.func @add(%x: !kiln.ptr<f32>, %y: !kiln.ptr<f32>, %n: index) {
      ...
      kiln.return
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<FunctionType>:$function_type,
                       OptionalAttr<StrAttr>:$sym_visibility,
                       OptionalAttr<DictArrayAttr>:$arg_attrs,
                       OptionalAttr<DictArrayAttr>:$res_attrs);
  let regions = (region AnyRegion:$body);
  let builders = [OpBuilder<(ins "::llvm::StringRef":$name,
                                 "::mlir::FunctionType":$type)>];
  let extraClassDeclaration = [{
    ::mlir::Region *getCallableRegion() {
      return isExternal() ? nullptr : &getBody();
    }
    ::llvm::ArrayRef<::mlir::Type> getArgumentTypes() {
      return getFunctionType().getInputs();
    }
    ::llvm::ArrayRef<::mlir::Type> getResultTypes() {
      return getFunctionType().getResults();
    }
    bool isDeclaration() { return isExternal(); }
    /// The number of grid axes a launch provides (the `grid_rank` attribute,
    /// 1 when absent).
    unsigned getGridRank();
  }];
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Kiln_ReturnOp : Kiln_Op<"return", [
    Pure, HasParent<"FuncOp">, ReturnLike, Terminator]> {
  let summary = "Ends a kernel's body";
  let description = [{
    Terminates the body of a `kiln.func`. Kernels write their results to
    memory, so `kiln.return` takes no operands.

    ```mlir
    kiln.return
    ```
  }];
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Launch grid
//===----------------------------------------------------------------------===//

def Kiln_ProgramIdOp : Kiln_Op<"program_id", [Pure]> {
  let summary = "The id of the running program along one grid axis";
  let description = [{
    Returns the index, in `[0, kiln.num_programs)`, of the program instance
    that runs this body along grid axis `x`, `y` or `z`. The axis must be
    below the enclosing kernel's `grid_rank`.

    ```mlir
    %pid = kiln.program_id x : i32
    ```
  }];
  let arguments = (ins Kiln_Axis:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Kiln_NumProgramsOp : Kiln_Op<"num_programs", [Pure]> {
  let summary = "The size of the launch grid along one axis";
  let description = [{
    Returns the number of program instances launched along grid axis `x`,
    `y` or `z`. The axis must be below the enclosing kernel's `grid_rank`.

    ```mlir
    %n = kiln.num_programs y : i32
    ```
  }];
  let arguments = (ins Kiln_Axis:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Tile construction and shape manipulation
//===----------------------------------------------------------------------===//

def Kiln_ArangeOp : Kiln_Op<"arange", [Pure]> {
  let summary = "A 1-D tile of consecutive integers";
  let description = [{
    Returns the tile `[start, start + 1, ..., end - 1]`. The result is a 1-D
    tile of a signless integer type with exactly `end - start` elements.

    ```mlir
    %r = kiln.arange 0, 64 : tensor<64xi32>
    ```
  }];
  let arguments = (ins I64Attr:$start, I64Attr:$end);
  let results = (outs Kiln_IntTile:$result);
  let assemblyFormat = "$start `,` $end attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Kiln_SplatOp : Kiln_Op<"splat", [Pure,
    TypesMatchWith<"result element type matches the scalar operand",
                   "result", "value",
                   "::llvm::cast<::mlir::ShapedType>($_self).getElementType()">]> {
  let summary = "A tile with every element equal to one scalar";
  let description = [{
    Broadcasts a scalar to every element of a tile. A splat of a constant
    folds to a constant tile.

    ```mlir
    %t = kiln.splat %x : tensor<16x64xf32>
    ```
  }];
  let arguments = (ins AnyType:$value);
  let results = (outs Kiln_Tile:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasFolder = 1;
}

def Kiln_BroadcastOp : Kiln_Op<"broadcast", [Pure]> {
  let summary = "Repeats a tile along its size-1 dimensions";
  let description = [{
    Returns a tile of the result shape in which each size-1 dimension of the
    source is repeated. Source and result have the same rank and element
    type; every source dimension is 1 or equal to the result's. Use
    `kiln.expand_dims` first to add dimensions.

    Folds away when source and result types are equal; a broadcast of a
    splat becomes a splat, and a broadcast of a broadcast one broadcast.

    ```mlir
    %b = kiln.broadcast %row : tensor<1x64xf32> -> tensor<32x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$src);
  let results = (outs Kiln_Tile:$result);
  let assemblyFormat = "$src attr-dict `:` type($src) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Kiln_ExpandDimsOp : Kiln_Op<"expand_dims", [Pure]> {
  let summary = "Inserts a size-1 dimension into a tile";
  let description = [{
    Returns the source tile with a new dimension of size 1 at position
    `axis` (`0 <= axis <= rank(src)`), like `x[None, :]` in NumPy.

    ```mlir
    %c = kiln.expand_dims %v [1] : tensor<64xf32> -> tensor<64x1xf32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$src, I32Attr:$axis);
  let results = (outs Kiln_Tile:$result);
  let assemblyFormat =
      "$src `[` $axis `]` attr-dict `:` type($src) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Kiln_ReshapeOp : Kiln_Op<"reshape", [Pure]> {
  let summary = "Reinterprets a tile's elements with another shape";
  let description = [{
    Returns the elements of the source, in row-major order, as a tile of the
    result shape. The element count and element type must be unchanged.
    Folds away when the types are equal, merges with a producing reshape, and
    folds constant splats.

    ```mlir
    %r = kiln.reshape %t : tensor<4x16xf32> -> tensor<64xf32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$src);
  let results = (outs Kiln_Tile:$result);
  let assemblyFormat = "$src attr-dict `:` type($src) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Kiln_TransOp : Kiln_Op<"trans", [Pure]> {
  let summary = "Permutes the dimensions of a tile";
  let description = [{
    Returns the source with its dimensions permuted: result dimension `i` is
    source dimension `order[i]`. `order` is a permutation of
    `[0, rank(src))`. The identity permutation folds away; a transpose of a
    transpose becomes one transpose (or nothing).

    ```mlir
    %t = kiln.trans %a [1, 0] : tensor<32x64xf32> -> tensor<64x32xf32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$src, DenseI32ArrayAttr:$order);
  let results = (outs Kiln_Tile:$result);
  let assemblyFormat =
      "$src $order attr-dict `:` type($src) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Memory: views, tile loads and stores
//===----------------------------------------------------------------------===//

def Kiln_IntToPtrOp : Kiln_Op<"int_to_ptr", [Pure]> {
  let summary = "A pointer from a 64-bit address";
  let description = [{
    The pointer whose address is `addr` (a byte address, as `data_ptr()`
    gives): Triton's `x.to(tl.pointer_type(T))` of a loaded int64, which
    tables of pointers need (a grouped GEMM's per-group matrices, MoE
    experts' weights). Nothing checks the address: it must point at memory
    the kernel may access, aligned to the element type, as the kernel's own
    pointer arguments do.

    ```mlir
    %a = kiln.int_to_ptr %addr : i64 -> !kiln.ptr<f16>
    ```
  }];
  let arguments = (ins I64:$addr);
  let results = (outs Kiln_PtrType:$result);
  let assemblyFormat = "$addr attr-dict `:` type($addr) `->` qualified(type($result))";
}

def Kiln_MakeViewOp : Kiln_Op<"make_view", [Pure, AttrSizedOperandSegments]> {
  let summary = "Builds a strided, runtime-shaped view from a pointer";
  let description = [{
    Returns a view of rank `r` over the memory at `base`: element
    `(i0, ..., iR)` lives at `base + sum_k ik * strides[k]` (in
    elements), and the view's valid index range in dimension `k` is
    `[0, sizes[k])`. Exactly `r` sizes and `r` strides are given, all of type
    `index`; strides may be any non-negative value (0 repeats an element).

    ```mlir
    %v = kiln.make_view %a, [%m, %k], [%k, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
    ```
  }];
  let arguments = (ins Kiln_PtrType:$base, Variadic<Index>:$sizes,
                       Variadic<Index>:$strides);
  let results = (outs Kiln_ViewType:$result);
  let assemblyFormat = [{
    $base `,` `[` $sizes `]` `,` `[` $strides `]` attr-dict `:`
    qualified(type($base)) `->` qualified(type($result))
  }];
  let hasVerifier = 1;
}

def Kiln_LoadOp : Kiln_Op<"load", [MemoryEffects<[MemRead]>]> {
  let summary = "Reads a tile from a view at element offsets, masking the edges";
  let description = [{
    Reads the tile whose first element is at `offsets` in `view`: result
    element `(j_0, ...)` is `view[offsets[0] + j_0, ...]`. Elements whose
    index falls outside the view's shape (or is negative) read `padding`
    (zero when absent) and touch no memory, so a kernel loads the ragged edge
    of a tensor without branches.

    `in_bounds` optionally records, per dimension, that the tile is known to
    lie inside the view (the canonicalizer sets it when sizes and offsets are
    constants); targets skip the mask there.

    ```mlir
    %t = kiln.load %v[%i, %j] padding(0xFF800000 : f32) : !kiln.view<2xf32> -> tensor<32x64xf32>
    ```
  }];
  let arguments = (ins Kiln_ViewType:$view, Variadic<Index>:$offsets,
                       OptionalAttr<TypedAttrInterface>:$padding,
                       OptionalAttr<DenseBoolArrayAttr>:$in_bounds);
  let results = (outs Kiln_Tile:$result);
  let assemblyFormat = [{
    $view `[` $offsets `]` (`padding` `(` $padding^ `)`)? attr-dict `:`
    qualified(type($view)) `->` type($result)
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Kiln_StoreOp : Kiln_Op<"store", [MemoryEffects<[MemWrite]>]> {
  let summary = "Writes a tile into a view at element offsets, dropping the edges";
  let description = [{
    Writes `value` so that its element `(j_0, ...)` lands at
    `view[offsets[0] + j_0, ...]`. Elements whose index falls outside the
    view's shape are not written. `in_bounds` is as for `kiln.load`.

    `streaming` says the data is not read again soon (Triton's
    `cache_modifier=".cs"` or `eviction_policy="evict_first"`). The x86
    targets then write a tile whose rows start on vector boundaries with
    non-temporal stores, which skip reading the destination's cache lines
    first (a large copy moves a third fewer bytes), followed by an `sfence`;
    other tiles, and the GPU targets, store as usual. The values written
    are the same either way.

    ```mlir
    kiln.store %t, %v[%i, %j] : tensor<32x64xf32> -> !kiln.view<2xf32>
    kiln.store %t, %v[%i, %j] {streaming} : tensor<32x64xf32> -> !kiln.view<2xf32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$value, Kiln_ViewType:$view,
                       Variadic<Index>:$offsets,
                       OptionalAttr<DenseBoolArrayAttr>:$in_bounds,
                       UnitAttr:$streaming);
  let assemblyFormat = [{
    $value `,` $view `[` $offsets `]` attr-dict `:` type($value) `->`
    qualified(type($view))
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Kiln_AtomicAddOp : Kiln_Op<"atomic_add", [
    MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["value", "old"]>]> {
  let summary = "Atomically adds a tile into a view, dropping the edges";
  let description = [{
    For every element of `value` whose destination
    `view[offsets[0] + j_0, ...]` lies inside the view, atomically performs
    `dest += value[j]`. Program instances may add into the same elements
    concurrently (split-K reductions, histogram-like scatters); the order of
    the additions is unspecified.

    The result `old` holds, per element, the destination's value just
    before this op's addition to it (what the atomic read), and zero for
    elements outside the view. That is how a kernel claims slots: adding 1
    to a counter per token returns each token's position (MoE routing,
    compaction). Results nobody uses cost nothing.

    Ordering: the program's memory accesses before the op happen before its
    additions, and they before the program's accesses after it (acq_rel for
    the whole program, at GPU scope on GPUs: a barrier and a fence on either
    side). A program may thus publish its partial results with a store and
    then count itself done; the program whose addition reads the last count
    sees every partial result.

    ```mlir
    kiln.atomic_add %t, %v[%i, %j] : tensor<16x16xf32> -> !kiln.view<2xf32>
    %pos = kiln.atomic_add %ones, %count[%e] : tensor<8xi32> -> !kiln.view<1xi32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$value, Kiln_ViewType:$view,
                       Variadic<Index>:$offsets);
  let results = (outs Kiln_Tile:$old);
  let assemblyFormat = [{
    $value `,` $view `[` $offsets `]` attr-dict `:` type($value) `->`
    qualified(type($view))
  }];
  let hasVerifier = 1;
}

def Kiln_GatherOp : Kiln_Op<"gather", [MemoryEffects<[MemRead]>]> {
  let summary = "Reads the rows of a view named by an index tile";
  let description = [{
    Reads, for each `n`, the row `indices[n]` of `view` (its first
    dimension), starting at `offsets` in the remaining dimensions:

        result[n, j1, ..., jR] =
            view[indices[n], offsets[0] + j1, ..., offsets[R-1] + jR]

    `indices` is a 1-D tile of signless integers with as many elements as the
    result's first dimension; `offsets` has one `index` per view dimension
    after the first. A row index outside `[0, size_0)` (for example the `-1`
    padding of a top-k list) and elements outside the view read `padding`
    (zero when absent) and touch no memory. This is the access of
    embeddings, paged KV caches, MoE permutation and token-sparse attention.

    ```mlir
    %rows = kiln.gather %kv[%idx, %c0] : !kiln.view<2xbf16>, tensor<64xi32> -> tensor<64x128xbf16>
    ```
  }];
  let arguments = (ins Kiln_ViewType:$view, Kiln_Tile:$indices,
                       Variadic<Index>:$offsets,
                       OptionalAttr<TypedAttrInterface>:$padding);
  let results = (outs Kiln_Tile:$result);
  let assemblyFormat = [{
    $view `[` $indices (`,` $offsets^)? `]` (`padding` `(` $padding^ `)`)?
    attr-dict `:` qualified(type($view)) `,` type($indices) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_ScatterOp : Kiln_Op<"scatter", [MemoryEffects<[MemWrite]>]> {
  let summary = "Writes the rows of a tile to the view rows named by an index tile";
  let description = [{
    The inverse of `kiln.gather`: for each `n`, writes `value[n, ...]` to row
    `indices[n]` of `view`, at `offsets` in the remaining dimensions. Rows
    whose index is outside `[0, size_0)` and elements outside the view are
    not written. If two indices are equal, which write lands is unspecified.

    ```mlir
    kiln.scatter %t, %out[%idx, %c0] : tensor<64x128xf32>, tensor<64xi32> -> !kiln.view<2xf32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$value, Kiln_ViewType:$view,
                       Kiln_Tile:$indices, Variadic<Index>:$offsets);
  let assemblyFormat = [{
    $value `,` $view `[` $indices (`,` $offsets^)? `]` attr-dict `:`
    type($value) `,` type($indices) `->` qualified(type($view))
  }];
  let hasVerifier = 1;
}

def Kiln_ScatterAddOp : Kiln_Op<"scatter_add", [
    MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["value", "old"]>]> {
  let summary = "Atomically adds the rows of a tile into the view rows named by an index tile";
  let description = [{
    The atomic form of `kiln.scatter`: for each `n`, atomically adds
    `value[n, ...]` into row `indices[n]` of `view`, at `offsets` in the
    remaining dimensions. Rows whose index is outside `[0, size_0)` (a `-1`
    for "nothing") and elements outside the view are dropped. Equal indices
    are fine: every addition lands, in an unspecified order. This is a
    histogram (`kl.atomic_add(hist + bins, 1)`), MoE routing's per-expert
    counts, and gradient accumulation into embedding rows.

    Like `kiln.atomic_add`, the result `old` holds what each addition read
    (the destination just before it), and zero for dropped elements; the op
    is ordered as `kiln.atomic_add` is.

    ```mlir
    %slot = kiln.scatter_add %ones, %count[%expert] : tensor<64xi32>, tensor<64xi32> -> !kiln.view<1xi32>
    kiln.scatter_add %g, %emb[%tok, %c0] : tensor<16x64xf32>, tensor<16xi64> -> !kiln.view<2xf32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$value, Kiln_ViewType:$view,
                       Kiln_Tile:$indices, Variadic<Index>:$offsets);
  let results = (outs Kiln_Tile:$old);
  let assemblyFormat = [{
    $value `,` $view `[` $indices (`,` $offsets^)? `]` attr-dict `:`
    type($value) `,` type($indices) `->` qualified(type($view))
  }];
  let hasVerifier = 1;
}

def Kiln_AtomicRMWOp : Kiln_Op<"atomic_rmw", [
    MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["value", "old"]>]> {
  let summary = "Atomically combines a tile into a view (max, min, exchange, bitwise)";
  let description = [{
    `kiln.atomic_add` with another combiner: for every element of `value`
    whose destination `view[offsets[0] + j_0, ...]` lies inside the view,
    atomically performs `dest = dest (kind) value[j]`:

    * `add`, `max`, `min`: f32, f64, i32, i64 (`max` and `min` of floats
      propagate NaN, as `arith.maximumf`; integers compare signed);
    * `xchg`: stores the value (f32, f64, i32, i64);
    * `and`, `or`, `xor`: i32, i64.

    `old` holds what each operation read (zero outside the view); ordering
    as `kiln.atomic_add`. Triton's `tl.atomic_max` and friends; an amax
    for fp8 scales is `kiln.atomic_rmw max` of a row maximum.

    ```mlir
    %o = kiln.atomic_rmw max %amax, %scale[%c0] : tensor<1xf32> -> !kiln.view<1xf32>
    ```
  }];
  let arguments = (ins Kiln_AtomicKind:$kind, Kiln_Tile:$value,
                       Kiln_ViewType:$view, Variadic<Index>:$offsets);
  let results = (outs Kiln_Tile:$old);
  let assemblyFormat = [{
    $kind $value `,` $view `[` $offsets `]` attr-dict `:` type($value) `->`
    qualified(type($view))
  }];
  let hasVerifier = 1;
}

def Kiln_AtomicCASOp : Kiln_Op<"atomic_cas", [
    MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["cmp", "value", "old"]>]> {
  let summary = "Atomically compares and swaps the elements of a tile in a view";
  let description = [{
    For every element `j` of `value` whose destination
    `view[offsets[0] + j_0, ...]` lies inside the view, atomically: if the
    destination's bits equal `cmp[j]`'s, it becomes `value[j]`. `old` holds
    what each operation read (zero outside the view), so `old[j] == cmp[j]`
    says the swap happened. Elements are i32, i64, f32 or f64 (floats are
    compared bit for bit, as CUDA's `atomicCAS`: a NaN matches its own bits,
    -0.0 does not match 0.0). Ordering as `kiln.atomic_add`. Triton's
    `tl.atomic_cas`: spin locks (`while atomic_cas(lock, 0, 1) == 1`) and
    lock-free updates.

    ```mlir
    %o = kiln.atomic_cas %zero, %one, %lock[%c0] : tensor<1xi32> -> !kiln.view<1xi32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$cmp, Kiln_Tile:$value, Kiln_ViewType:$view,
                       Variadic<Index>:$offsets);
  let results = (outs Kiln_Tile:$old);
  let assemblyFormat = [{
    $cmp `,` $value `,` $view `[` $offsets `]` attr-dict `:` type($value) `->`
    qualified(type($view))
  }];
  let hasVerifier = 1;
}

def Kiln_ScatterRMWOp : Kiln_Op<"scatter_rmw", [
    MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["value", "old"]>]> {
  let summary = "Atomically combines the rows of a tile into the view rows named by an index tile";
  let description = [{
    `kiln.scatter_add` with the combiners of `kiln.atomic_rmw`: for each `n`,
    atomically combines `value[n, ...]` into row `indices[n]` of `view`, at
    `offsets` in the remaining dimensions; rows outside `[0, size_0)` and
    elements outside the view are dropped (`old` reads zero there).

    ```mlir
    %o = kiln.scatter_rmw max %v, %best[%bucket] : tensor<64xi32>, tensor<64xi32> -> !kiln.view<1xi32>
    ```
  }];
  let arguments = (ins Kiln_AtomicKind:$kind, Kiln_Tile:$value,
                       Kiln_ViewType:$view, Kiln_Tile:$indices,
                       Variadic<Index>:$offsets);
  let results = (outs Kiln_Tile:$old);
  let assemblyFormat = [{
    $kind $value `,` $view `[` $indices (`,` $offsets^)? `]` attr-dict `:`
    type($value) `,` type($indices) `->` qualified(type($view))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Tile algebra
//===----------------------------------------------------------------------===//

def Kiln_DotOp : Kiln_Op<"dot", [Pure,
    AllTypesMatch<["acc", "result"]>]> {
  let summary = "Tile matrix multiply-accumulate, with mixed precision";
  let description = [{
    Returns `acc + lhs x rhs` for `lhs : MxK`, `rhs : KxN`, `acc : MxN`.
    The products are computed and summed in the accumulator's element type.
    Supported element types (lhs, rhs -> acc): f32 x f32 -> f32,
    f64 x f64 -> f64, f16 x f16 -> f16 or f32, bf16 x bf16 -> f32,
    i8 x i8 -> i32.

    8-bit floats: with `lhs_fp8` and `rhs_fp8` (each `"e4m3"`, OCP E4M3FN,
    or `"e5m2"`), the i8 operands hold fp8 bits and the dot is
    i8 x i8 -> f32 on their values (exact products, summed in f32). sm_90a
    multiplies such a dot with wgmma's e4m3 / e5m2 forms where both operands
    can be laid out K-major in place (A a load, B the transpose of a load);
    every other target and dot decodes the operands to bf16 first
    (`expandFp8Dots`: exact, e4m3's NaN and e5m2's infinities kept).

    Canonicalization folds an addition to a dot from zeros into the dot's
    accumulator: `arith.addf %acc, (kiln.dot %a, %b, zeros)` becomes
    `kiln.dot %a, %b, %acc` (likewise `arith.addi`), Triton's
    `acc += tl.dot(a, b)` idiom. The products are then summed into `acc`
    rather than summed apart and added (a different float rounding order,
    the one an accumulating dot has anyway), and GPU targets keep such an
    accumulator in the tensor cores' registers across a loop.

    ```mlir
    %c = kiln.dot %a, %b, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$lhs, Kiln_Tile:$rhs, Kiln_Tile:$acc,
                       OptionalAttr<StrAttr>:$lhs_fp8,
                       OptionalAttr<StrAttr>:$rhs_fp8);
  let results = (outs Kiln_Tile:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $acc attr-dict `:` type($lhs) `,` type($rhs) `->`
    type($result)
  }];
  let builders = [
    OpBuilder<(ins "Type":$result, "Value":$lhs, "Value":$rhs, "Value":$acc),
      [{ build($_builder, $_state, result, lhs, rhs, acc, StringAttr(),
               StringAttr()); }]>
  ];
  let extraClassDeclaration = [{
    /// Whether the operands hold fp8 bits (lhs_fp8 and rhs_fp8 set).
    bool isFp8() { return getLhsFp8().has_value(); }
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Kiln_ReduceOp : Kiln_Op<"reduce", [Pure]> {
  let summary = "Reduces a tile along one axis";
  let description = [{
    Combines the elements of `src` along dimension `axis` with `kind`:

    * `sum`, `max`, `min`, `prod`: the result has the source's element
      type. `max` and `min` propagate NaN (as `arith.maximumf`); float `sum`
      and `prod` may be associated in any order, integer ones wrap.
    * `argmax`, `argmin`: the result is the `i32` position along `axis` of
      the first largest (smallest) element.

    The result is the source tile without dimension `axis`; reducing a 1-D
    tile gives a scalar.

    ```mlir
    %m = kiln.reduce max %t [1] : tensor<32x64xf32> -> tensor<32xf32>
    %s = kiln.reduce sum %v [0] : tensor<64xf32> -> f32
    ```
  }];
  let arguments = (ins Kiln_ReduceKind:$kind, Kiln_Tile:$src, I32Attr:$axis);
  let results = (outs AnyType:$result);
  let assemblyFormat =
      "$kind $src `[` $axis `]` attr-dict `:` type($src) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_ScanOp : Kiln_Op<"scan", [Pure, AllTypesMatch<["src", "result"]>]> {
  let summary = "Running (prefix) combination of a tile along one axis";
  let description = [{
    Returns the inclusive scan of `src` along dimension `axis` with `kind`
    (`sum`, `max`, `min` or `prod`; the combiners of `kiln.reduce`):

        result[..., j, ...] = src[..., 0, ...] (+) ... (+) src[..., j, ...]

    With `reverse`, the scan runs from the end:
    `result[..., j, ...] = src[..., j, ...] (+) ... (+) src[..., n-1, ...]`.
    The result has the source's type. `max` and `min` propagate NaN (as
    `arith.maximumf`); a float `sum` or `prod` may be associated in any
    order (the GPU target combines per-thread chunks of the axis), integer
    ones wrap.

    This is Triton's `tl.cumsum` / `tl.cumprod`: the offsets of variable-sized
    groups (MoE routing's per-expert token counts become write positions),
    running maxima, stream compaction.

    ```mlir
    %pos = kiln.scan sum %counts [0] : tensor<64xi32>
    %suf = kiln.scan max %t [1] reverse : tensor<16x128xf32>
    ```
  }];
  let arguments = (ins Kiln_ReduceKind:$kind, Kiln_Tile:$src, I32Attr:$axis,
                       UnitAttr:$reverse);
  let results = (outs Kiln_Tile:$result);
  let assemblyFormat =
      "$kind $src `[` $axis `]` (`reverse` $reverse^)? attr-dict `:` type($src)";
  let hasVerifier = 1;
}

def Kiln_GatherElementsOp : Kiln_Op<"gather_elements", [Pure]> {
  let summary = "Picks elements of a tile along one axis by an index tile";
  let description = [{
    Reads `src` along dimension `axis` at the positions `indices` holds:

        result[i0, ..., i_axis, ..., iR] =
            src[i0, ..., indices[i0, ..., i_axis, ..., iR], ..., iR]

    `indices` (a tile of signless integers) has `src`'s rank and its sizes
    in every dimension but `axis`; the result has `indices`' shape and
    `src`'s element type. A position outside `[0, src.shape[axis])` reads
    zero. This is a gather inside registers or shared memory, no memory
    access: Triton's `tl.gather(src, index, axis)` (torch.gather's
    semantics). Uses: codebook lookups (4-bit NF4 / FP4 values to floats
    through a 16-entry table), permuting the lanes of a tile by computed
    positions, top-k bookkeeping.

    ```mlir
    %v = kiln.gather_elements %lut, %codes [0] : tensor<16xf32>, tensor<4096xi32> -> tensor<4096xf32>
    ```
  }];
  let arguments = (ins Kiln_Tile:$src, Kiln_IntTile:$indices, I32Attr:$axis);
  let results = (outs Kiln_Tile:$result);
  let assemblyFormat = [{
    $src `,` $indices `[` $axis `]` attr-dict `:` type($src) `,` type($indices)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Debugging
//===----------------------------------------------------------------------===//

def Kiln_AssertOp : Kiln_Op<"assert", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Fails the launch unless every element of a condition holds";
  let description = [{
    Checks that every element of `cond` (an `i1` tile, or an `i1` scalar) is
    true. When one is not, the program stops there and the launch fails with
    an error that names `message`, the op's location and the program: on the
    CPU and the GPU emulator the launch returns `KILN_ERROR_ASSERT` (the
    other programs of the grid may or may not have run); on an NVIDIA GPU the
    failing threads call `__assertfail`, which prints the message and aborts
    the kernel, and the CUDA context reports `CUDA_ERROR_ASSERT` from then
    on, as any CUDA device-side assert (the runtime returns it as
    `KILN_ERROR_ASSERT`).

    This is Triton's `tl.device_assert`, which Kiln's front end emits only
    for kernels compiled with `debug=True` (or `KILN_DEBUG=1`). The memory
    effects keep it in place: loads and stores after it do not move above
    it, so an assert guards the indices an access uses.

    ```mlir
    kiln.assert %in_range, "index out of range" : tensor<128xi1>
    ```
  }];
  let arguments = (ins AnyTypeOf<[StaticShapeTensorOf<[I1]>, I1]>:$cond,
                       StrAttr:$message);
  let assemblyFormat = "$cond `,` $message attr-dict `:` type($cond)";
}

def Kiln_PrintOp : Kiln_Op<"print", [MemoryEffects<[MemWrite]>]> {
  let summary = "Prints scalars and the elements of tiles from the kernel";
  let description = [{
    Prints each element of each operand on a line of its own, as

        pid (x, y, z) idx (i, j) PREFIX VALUE

    (`idx` is omitted for scalars; with more than one operand, `(operand k)`
    follows the prefix). Floats print as `%.9g` (`%.17g` for f64: either
    reads back as the same value), integers as signed decimals, `i1` as 0
    or 1; with `hex`, every element prints as the hexadecimal bits of its
    type. On the CPU each line is written with one `printf` (lines of concurrent programs
    do not mix, but their order does), and stdout is flushed after the op;
    on an NVIDIA GPU each thread prints its own elements with `vprintf`
    (scalars from thread 0 only), which the driver writes out at the next
    synchronization. This is Triton's `tl.device_print`.

    ```mlir
    kiln.print "acc: " %acc : tensor<16x16xf32>
    ```
  }];
  let arguments = (ins StrAttr:$prefix, Variadic<AnyType>:$args,
                       UnitAttr:$hex);
  let assemblyFormat =
      "$prefix ($args^ `:` type($args))? (`hex` $hex^)? attr-dict";
  let hasVerifier = 1;
}

def Kiln_ClockOp : Kiln_Op<"clock", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Reads the cycle counter of the processor running the program";
  let description = [{
    Returns the current value of a free-running 64-bit cycle counter of the
    processor that runs the program: on an NVIDIA GPU the SM's `%clock64`
    (SM clock cycles), on the CPU the time-stamp counter
    (`llvm.readcyclecounter`: `rdtsc` on x86-64), under the GPU emulator
    the host's monotonic clock in nanoseconds. Differences between two
    readings of one program measure how long the code between them took;
    readings of programs on different processors are not comparable. This
    is Triton's `tl.extra.cuda.clock`-style intra-kernel timing, for finding
    where a program's time goes (an operator's prologue, its loops, its
    epilogue) on the device itself.

    The memory effects keep it in place: loads and stores do not move
    across it, two readings are never merged, and it is never hoisted out
    of a loop. On the GPU every thread reads its own SM's counter; a scalar
    use (a store of the value) takes the reading of the thread that
    performs it.

    ```mlir
    %t0 = kiln.clock : i64
    ```
  }];
  let results = (outs I64:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Kiln_ProcessorIdOp : Kiln_Op<"processor_id", [Pure]> {
  let summary = "The id of the processor running the program";
  let description = [{
    Returns which processor runs the program: on an NVIDIA GPU the SM's
    number (`%smid`, constant for a program's lifetime), on the CPU and
    under the GPU emulator the core the reading thread is on
    (`sched_getcpu`; a host thread may move between cores). With
    `kiln.clock`, whose readings are comparable only within one processor,
    it orders the programs that ran on each SM and measures the gaps
    between them (Triton's `tl.extra.cuda.smid`).

    ```mlir
    %sm = kiln.processor_id : i32
    ```
  }];
  let results = (outs I32:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

#endif // KILN_OPS_TD
