// On NVIDIA GPUs f32 exp is the special-function unit's ex2.approx.ftz
// (exp(x) = 2^(x log2 e), as CUDA's __expf), not the polynomial the CPU and
// the SIMT emulator use (a floor, an exponent shift and about twenty more
// instructions per element). Softmax and attention spend their inner loop on it.
// RUN: kilnc %S/../../../examples/softmax.mlir --target sm_80 --emit ptx | FileCheck %s
// RUN: kilnc %S/../../../examples/softmax.mlir --target sm_90a --emit ptx | FileCheck %s
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --emit ptx | FileCheck %s
// CHECK: mul.rn.f32 {{.*}}, 0f3FB8AA3B;
// CHECK: ex2.approx.ftz.f32
// CHECK-NOT: cvt.rmi.f32.f32
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
// f64 stays (a polynomial does not apply either: libdevice).
// PASS: math.exp %{{.*}} : f64
module attributes {gpu.container_module} {
  func.func @host(%x: f32) -> f32 {
    %y = math.exp %x : f32
    return %y : f32
  }
  gpu.module @m {
    gpu.func @device(%x: f32, %v: vector<2xf32>, %d: f64, %p: !llvm.ptr) kernel {
      %y = math.exp %x : f32
      %w = math.exp2 %v : vector<2xf32>
      %z = math.exp %d : f64
      llvm.store %y, %p : f32, !llvm.ptr
      llvm.store %w, %p : vector<2xf32>, !llvm.ptr
      llvm.store %z, %p : f64, !llvm.ptr
      gpu.return
    }
  }
}
