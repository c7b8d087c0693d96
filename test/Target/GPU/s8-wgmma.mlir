// int8 dots (i8 x i8 -> i32) on the tensor cores: with A a load and B the
// transpose of a load (both K-major, as wgmma's s8 form needs them: it
// cannot transpose; nor can ldmatrix transpose bytes), on sm_90a
// wgmma.mma_async...k32.s32.s8.s8 reads the bytes where TMA puts them, in
// the 128B swizzle (boxes of 128 byte columns), into s32 registers that
// start at zero (no buffer for the splat accumulator).
// RUN: kilnc %s --kernel matmul_s8 --target sm_90a --emit ptx -o - | FileCheck %s
// CHECK: cp.async.bulk.tensor
// CHECK: wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8
// RUN: kilnc %s --kernel matmul_s8_n_major --target sm_90a --emit ptx -o - | FileCheck %s --check-prefix=NMAJOR
// NMAJOR: wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8
// NMAJOR-NOT: mul.wide.s16
// RUN: kilnc %s --kernel matmul_s8_n_major --target sm_80 --emit ptx -o - | FileCheck %s --check-prefix=NMAJOR80
// NMAJOR80: mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32
// NMAJOR80-NOT: mul.wide.s16
//
// --no-swizzle: the no-swizzle core layout, filled by cp.async.
// RUN: kilnc %s --kernel matmul_s8 --target sm_90a --no-swizzle --emit ptx -o - | FileCheck %s --check-prefix=NOSWZ
// NOSWZ-NOT: cp.async.bulk.tensor
// NOSWZ: cp.async.cg.shared.global
// NOSWZ: wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8
//
// Without cp.async (async-copy=false) loads are not written in place in
// wgmma's core matrices, which 8-bit operands need: mma.sync's s8 form, and
// fp8 decoded to bf16 (this failed to compile before).
// RUN: kiln-opt %s '--convert-kiln-to-gpu=chip=sm_90a async-copy=false' | FileCheck %s --check-prefix=NOASYNC
// NOASYNC: nvvm.mma.sync
// NOASYNC-SAME: s8
// NOASYNC-NOT: nvvm.wgmma.mma_async
// RUN: kiln-opt %S/../../../examples/matmul_fp8.mlir '--convert-kiln-to-gpu=chip=sm_90a async-copy=false' | FileCheck %s --check-prefix=NOASYNC8
// NOASYNC8: nvvm.wgmma.mma_async
// NOASYNC8-SAME: bf16
//
// mma.sync targets: m16n8k32.s8, both operands read by ldmatrix as byte
// pairs from XOR-swizzled 128-byte rows (the address's bits 4-6 XORed with
// the row), filled by cp.async.
// RUN: kilnc %s --kernel matmul_s8 --target sm_80 --emit ptx -o - | FileCheck %s --check-prefix=SM80
// SM80: cp.async.cg.shared.global
// SM80: xor.b{{32|64}}
// SM80: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// SM80: mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32
// SM80-NOT: mul.wide.s16

// C = A Wᵀ, A [m, k] and W [n, k] int8, C int32. Grid (ceil(n / 64), ceil(m / 64)).
kiln.func @matmul_s8(%a: !kiln.ptr<i8>, %w: !kiln.ptr<i8>, %c: !kiln.ptr<i32>,
                     %m: index, %n: index, %k: index) attributes {grid_rank = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %pn = kiln.program_id x : i32
  %pm = kiln.program_id y : i32
  %pn_i = arith.index_cast %pn : i32 to index
  %pm_i = arith.index_cast %pm : i32 to index
  %row = arith.muli %pm_i, %c64 : index
  %col = arith.muli %pn_i, %c64 : index
  %va = kiln.make_view %a, [%m, %k], [%k, %c1] : !kiln.ptr<i8> -> !kiln.view<2xi8>
  %vw = kiln.make_view %w, [%n, %k], [%k, %c1] : !kiln.ptr<i8> -> !kiln.view<2xi8>
  %vc = kiln.make_view %c, [%m, %n], [%n, %c1] : !kiln.ptr<i32> -> !kiln.view<2xi32>
  %zero = arith.constant dense<0> : tensor<64x64xi32>
  %acc = scf.for %kk = %c0 to %k step %c128 iter_args(%acc_in = %zero) -> (tensor<64x64xi32>) {
    %ta = kiln.load %va[%row, %kk] : !kiln.view<2xi8> -> tensor<64x128xi8>
    %tw = kiln.load %vw[%col, %kk] : !kiln.view<2xi8> -> tensor<64x128xi8>
    %tb = kiln.trans %tw [1, 0] : tensor<64x128xi8> -> tensor<128x64xi8>
    %next = kiln.dot %ta, %tb, %acc_in : tensor<64x128xi8>, tensor<128x64xi8> -> tensor<64x64xi32>
    scf.yield %next : tensor<64x64xi32>
  }
  kiln.store %acc, %vc[%row, %col] : tensor<64x64xi32> -> !kiln.view<2xi32>
  kiln.return
}

// B [k, n] in rows of n (N-major): no s8 wgmma form reads it, nor ldmatrix
// (which transposes 16-bit elements only), so its tile is copied transposed
// by threads into the operand layout (transposeNMajorBytes), which both read
// K-major.
kiln.func @matmul_s8_n_major(%a: !kiln.ptr<i8>, %b: !kiln.ptr<i8>, %c: !kiln.ptr<i32>,
                             %m: index, %n: index, %k: index) attributes {grid_rank = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %pn = kiln.program_id x : i32
  %pm = kiln.program_id y : i32
  %pn_i = arith.index_cast %pn : i32 to index
  %pm_i = arith.index_cast %pm : i32 to index
  %row = arith.muli %pm_i, %c64 : index
  %col = arith.muli %pn_i, %c64 : index
  %va = kiln.make_view %a, [%m, %k], [%k, %c1] : !kiln.ptr<i8> -> !kiln.view<2xi8>
  %vb = kiln.make_view %b, [%k, %n], [%n, %c1] : !kiln.ptr<i8> -> !kiln.view<2xi8>
  %vc = kiln.make_view %c, [%m, %n], [%n, %c1] : !kiln.ptr<i32> -> !kiln.view<2xi32>
  %zero = arith.constant dense<0> : tensor<64x64xi32>
  %acc = scf.for %kk = %c0 to %k step %c64 iter_args(%acc_in = %zero) -> (tensor<64x64xi32>) {
    %ta = kiln.load %va[%row, %kk] : !kiln.view<2xi8> -> tensor<64x64xi8>
    %tb = kiln.load %vb[%kk, %col] : !kiln.view<2xi8> -> tensor<64x64xi8>
    %next = kiln.dot %ta, %tb, %acc_in : tensor<64x64xi8>, tensor<64x64xi8> -> tensor<64x64xi32>
    scf.yield %next : tensor<64x64xi32>
  }
  kiln.store %acc, %vc[%row, %col] : tensor<64x64xi32> -> !kiln.view<2xi32>
  kiln.return
}
