// kiln.atomic_cas: one `llvm.cmpxchg` per element at its address. On the GPU
// it is relaxed at GPU scope (`atom.relaxed.gpu.cas`), ordered like the
// other atomics by a fence.acq_rel.gpu on either side; f32 elements are
// compared as their bits (b32). On the CPU it is a sequentially consistent
// cmpxchg (x86's lock cmpxchg). (Its element types: test/Dialect/Kiln/invalid.mlir.)
// RUN: kilnc %s --kernel swap --target sm_80 --emit ptx | FileCheck %s
// RUN: kilnc %s --kernel swap --target sm_90a --emit ptx | FileCheck %s
// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s --check-prefix=CPU
// CHECK-LABEL: .entry swap
// CHECK: fence.acq_rel.gpu;
// CHECK: atom.relaxed.gpu.{{(global.)?}}cas.b32
// CHECK: fence.acq_rel.gpu;
// CPU-LABEL: func.func private @swap
// CPU: llvm.cmpxchg {{.*}} seq_cst seq_cst : !llvm.ptr, i32
// CPU-LABEL: func.func @kiln_entry_swap

kiln.func @swap(%x: !kiln.ptr<f32> {kiln.name = "x"}, %old: !kiln.ptr<f32> {kiln.name = "old"},
                %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vo = kiln.make_view %old, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %cmp = arith.constant dense<0.0> : tensor<128xf32>
  %val = arith.constant dense<1.0> : tensor<128xf32>
  %o = kiln.atomic_cas %cmp, %val, %vx[%c0] : tensor<128xf32> -> !kiln.view<1xf32>
  kiln.store %o, %vo[%c0] : tensor<128xf32> -> !kiln.view<1xf32>
  kiln.return
}

