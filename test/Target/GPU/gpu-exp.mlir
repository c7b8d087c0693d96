// On NVIDIA GPUs f32 exp is the special-function unit's ex2.approx.ftz
// (exp(x) = 2^(x log2 e), as CUDA's __expf), not the polynomial the CPU and
// the SIMT emulator use (a floor, an exponent shift and about twenty more
// instructions per element). Softmax and attention spend their inner loop on it:
// exp(s c - m) is fma(s, c, -m) times log2 e (the subtraction before the
// scaling keeps the error relative to s c - m, not to m), and the row max is
// max.NaN.
// RUN: kilnc %S/../../../examples/softmax.mlir --target sm_80 --emit ptx | FileCheck %s
// RUN: kilnc %S/../../../examples/softmax.mlir --target sm_90a --emit ptx | FileCheck %s
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --emit ptx | FileCheck %s --check-prefix=ATT
// CHECK: max.NaN.f32
// CHECK: mul.rn.f32 {{.*}}, 0f3FB8AA3B;
// CHECK: ex2.approx.ftz.f32
// CHECK-NOT: cvt.rmi.f32.f32
// CHECK-NOT: setp.nan.f32
// ATT: max.NaN.f32
// ATT: ex2.approx.ftz.f32
// ATT-NOT: cvt.rmi.f32.f32
// ATT-NOT: setp.nan.f32
// Attention's softmax runs in base 2 (scores times scale log2 e): each
// probability is an fma (s c - m; a subtraction where the mask selected the
// scaled score) and ex2, nothing between them.
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --emit ptx > %t.ptx
// RUN: grep -B1 ex2.approx.ftz.f32 %t.ptx | FileCheck %s --check-prefix=EX2S
// RUN: grep -B1 ex2.approx.ftz.f32 %t.ptx | FileCheck %s --check-prefix=EX2F
// EX2S: sub.rn.f32 %r[[X:[0-9]+]],
// EX2S-NEXT: ex2.approx.ftz.f32 %r{{[0-9]+}}, %r[[X]];
// EX2F: fma.rn.f32 %r[[Y:[0-9]+]],
// EX2F-NEXT: ex2.approx.ftz.f32 %r{{[0-9]+}}, %r[[Y]];
// Attention's P goes to the P.V dot's A registers as bf16 pairs: one cvt each.
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --emit ptx | FileCheck %s --check-prefix=PACK
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_80 --emit ptx | FileCheck %s --check-prefix=PACK
// PACK: cvt.rn.bf16x2.f32
// PACK-NOT: cvt.rn.bf16.f32
// The emulator keeps the polynomial (it runs on the host).
// RUN: kiln-opt %S/../../../examples/softmax.mlir --kiln-gpu-emulation-pipeline | FileCheck %s --check-prefix=EMU
// EMU-NOT: nvvm.ex2
// EMU: llvm.intr.floor
// And the pass alone: only inside gpu.modules.
// RUN: kiln-opt %s --kiln-approximate-math=nvvm-ex2=true | FileCheck %s --check-prefix=PASS
// PASS-LABEL: func.func @host
// PASS-NOT: llvm.call_intrinsic
// PASS-LABEL: gpu.func @device
// PASS: %[[L:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// PASS: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[L]])
// PASS: %[[V:.*]] = vector.extract %{{.*}}[0] : f32 from vector<2xf32>
// PASS: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[V]])
// PASS: vector.extract %{{.*}}[1] : f32 from vector<2xf32>
// PASS: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// PASS-NOT: math.exp2
// exp(s c - m): fma(s, c, -m), then times log2 e.
// PASS: %[[N:.*]] = arith.negf %arg6 : f32
// PASS: %[[F:.*]] = llvm.intr.fma(%arg4, %arg5, %[[N]]) : (f32, f32, f32) -> f32
// PASS: %[[L2:.*]] = arith.mulf %[[F]], %{{.*}} : f32
// PASS: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[L2]])
// f64 stays (a polynomial does not apply either: libdevice).
// PASS: math.exp %{{.*}} : f64
module attributes {gpu.container_module} {
  func.func @host(%x: f32) -> f32 {
    %y = math.exp %x : f32
    return %y : f32
  }
  gpu.module @m {
    gpu.func @device(%x: f32, %v: vector<2xf32>, %d: f64, %p: !llvm.ptr,
                     %s: f32, %c: f32, %m: f32) kernel {
      %y = math.exp %x : f32
      %w = math.exp2 %v : vector<2xf32>
      %sc = arith.mulf %s, %c : f32
      %t = arith.subf %sc, %m : f32
      %e = math.exp %t : f32
      %z = math.exp %d : f64
      llvm.store %e, %p : f32, !llvm.ptr
      llvm.store %y, %p : f32, !llvm.ptr
      llvm.store %w, %p : vector<2xf32>, !llvm.ptr
      llvm.store %z, %p : f64, !llvm.ptr
      gpu.return
    }
  }
}
