// kiln.clock: %clock64 on the GPU targets, llvm.readcyclecounter on the CPU,
// the emulator's clock under emu-sm_XY; kiln.processor_id: %smid, libc's
// sched_getcpu, the emulator's. The clock's memory effects keep every reading
// where it is: readings are not merged (CSE), not hoisted out of a loop, not
// moved across a store, and not dropped when unused. (Values at run time:
// test_features.py, test_clock_readings_go_forward, and test_ops.py,
// test_attention_profile_stamps.)
// RUN: kiln-opt %s --canonicalize --cse --kiln-hoist-invariants | FileCheck %s --check-prefix=IR
// RUN: kilnc %s --kernel clk --target sm_90a --emit ptx | FileCheck %s
// RUN: kilnc %s --kernel clk --target sm_80 --emit ptx | FileCheck %s
// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s --check-prefix=CPU
// RUN: kilnc %s --kernel clk --target emu-sm_90a --emit mlir | FileCheck %s --check-prefix=EMU
// RUN: %if ptxas %{ kilnc %s --kernel clk --target sm_90a --emit ptx -o %t.ptx %}
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t.ptx -o %t.cubin %}
// IR-LABEL: kiln.func @clk
// IR: kiln.clock : i64
// IR: scf.for
// IR: kiln.clock : i64
// IR: scf.yield
// IR-NOT: kiln.clock
// IR: kiln.store
// IR: kiln.clock : i64
// IR: kiln.store
// IR: kiln.clock : i64
// IR: kiln.processor_id : i32
// CHECK-LABEL: .entry clk
// CHECK: mov.u64 {{.*}}, %clock64;
// CHECK: mov.u64 {{.*}}, %clock64;
// CHECK: st.global
// CHECK: mov.u64 {{.*}}, %clock64;
// CHECK: st.global
// CHECK: mov.u64 {{.*}}, %clock64;
// CHECK-NOT: %clock64
// CHECK: mov.u32 {{.*}}, %smid;
// CPU-LABEL: func.func private @clk
// CPU-COUNT-4: llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
// CPU-NOT: readcyclecounter
// CPU: llvm.call @sched_getcpu() : () -> i32
// EMU-COUNT-4: llvm.call @kiln_emu_clock() : () -> i64
// EMU-NOT: kiln_emu_clock
// EMU: llvm.call @kiln_emu_smid() : () -> i32

kiln.func @clk(%x: !kiln.ptr<f32> {kiln.name = "x"}, %t: !kiln.ptr<i64> {kiln.name = "t"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c128 = arith.constant 128 : index
  %t0 = kiln.clock : i64
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vt = kiln.make_view %t, [%c2], [%c1] : !kiln.ptr<i64> -> !kiln.view<1xi64>
  %z = arith.constant dense<0.0> : tensor<128xf32>
  %s = scf.for %i = %c0 to %n step %c128 iter_args(%acc = %z) -> tensor<128xf32> {
    %v = kiln.load %vx[%i] padding(0.0 : f32) : !kiln.view<1xf32> -> tensor<128xf32>
    %in = kiln.clock : i64
    %a = arith.addf %acc, %v : tensor<128xf32>
    scf.yield %a : tensor<128xf32>
  }
  kiln.store %s, %vx[%c0] : tensor<128xf32> -> !kiln.view<1xf32>
  %t1 = kiln.clock : i64
  %s0 = kiln.splat %t0 : tensor<1xi64>
  kiln.store %s0, %vt[%c0] : tensor<1xi64> -> !kiln.view<1xi64>
  %unused = kiln.clock : i64
  %s1 = kiln.splat %t1 : tensor<1xi64>
  kiln.store %s1, %vt[%c1] : tensor<1xi64> -> !kiln.view<1xi64>
  %sm = kiln.processor_id : i32
  %sm64 = arith.extsi %sm : i32 to i64
  %s2 = kiln.splat %sm64 : tensor<1xi64>
  %c2i = arith.constant 1 : index
  kiln.store %s2, %vt[%c2i] : tensor<1xi64> -> !kiln.view<1xi64>
  kiln.return
}
