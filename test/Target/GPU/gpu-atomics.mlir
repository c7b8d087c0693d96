// Atomics on the GPU: kiln.scatter_add (a histogram: each element adds into
// the row its index names) and kiln.atomic_add are `atom.global.add`, which
// PTX makes relaxed; a fence.acq_rel.gpu on either side (after a barrier
// before, before one after) orders the program's accesses around them, as
// the ops promise. The CPU's are locked RMWs, with no fence.
// RUN: kilnc %s --kernel histogram --target sm_80 --emit ptx | FileCheck %s
// RUN: kilnc %s --kernel histogram --target sm_90a --emit ptx | FileCheck %s
// RUN: kilnc %s --kernel histogram --target sm_90a --emit ptx | grep -B1 fence.acq_rel | FileCheck %s --check-prefix=PRE
// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s --check-prefix=CPU
// PRE: bar.sync
// PRE-NEXT: fence.acq_rel.gpu;
// CHECK-LABEL: .entry histogram
// CHECK: fence.acq_rel.gpu;
// CHECK-NOT: bar.sync
// CHECK: atom.global.add.u32
// CHECK: fence.acq_rel.gpu;
// CHECK-NEXT: bar.sync
// CPU-LABEL: func.func private @histogram
// CPU-NOT: llvm.fence
// CPU: memref.atomic_rmw addi
// CPU-NOT: llvm.fence
// CPU-LABEL: func.func @kiln_entry_histogram

kiln.func @histogram(%bins: !kiln.ptr<i32> {kiln.name = "bins"}, %hist: !kiln.ptr<i32> {kiln.name = "hist"},
                     %n: index {kiln.name = "n"}, %nb: index {kiln.name = "nb"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vb = kiln.make_view %bins, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %vh = kiln.make_view %hist, [%nb], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %b = kiln.load %vb[%c0] padding(-1 : i32) : !kiln.view<1xi32> -> tensor<100xi32>
  %one = arith.constant dense<1> : tensor<100xi32>
  %old = kiln.scatter_add %one, %vh[%b] : tensor<100xi32>, tensor<100xi32> -> !kiln.view<1xi32>
  kiln.return
}
