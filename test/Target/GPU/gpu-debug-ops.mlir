// kiln.assert and kiln.print. GPU targets: each thread checks its elements
// with __assertfail (CUDA's device-side assert) and prints with vprintf, both
// PTX system calls the driver provides, so the PTX assembles on its own.
// On the CPU the kernel exports `kiln_assert_hook` (the runtime's handler, set at
// load) and calls through it where an element fails; prints are printf
// calls, then fflush. (The messages and what a failure does at run time:
// test/python/test_features.py, test_device_*.)
// RUN: kilnc %s --kernel dbg --target sm_80 --emit ptx | FileCheck %s
// RUN: kilnc %s --kernel dbg --target sm_90a --emit ptx | FileCheck %s
// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s --check-prefix=CPU
// RUN: kilnc %s --kernel plain --emit mlir | FileCheck %s --check-prefix=NOHOOK
// RUN: %if ptxas %{ kilnc %s --kernel dbg --target sm_90a --emit ptx -o %t.ptx %}
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t.ptx -o %t.cubin %}
// CHECK: .extern .func {{.*}}vprintf
// CHECK: .extern .func __assertfail
// CHECK: .global .align 1 .b8 {{.*}}[12] = {105, 110, 32, 114, 97, 110, 103, 101, 32, 48, 33};
// CHECK-LABEL: .entry dbg
// CHECK-DAG: call.uni __assertfail,
// CHECK-DAG: call.uni (retval0), vprintf,
// CPU-DAG: llvm.func @printf(!llvm.ptr, ...) -> i32
// CPU-DAG: llvm.mlir.global external @kiln_assert_hook(0 : i64)
// CPU-DAG: llvm.mlir.global internal constant @kiln_assert_msg_{{[0-9a-f_]+}}("in range 0!\00")
// CPU-DAG: llvm.mlir.global internal constant @kiln_assert_site_{{[0-9a-f_]+}}("{{.*}}gpu-debug-ops.mlir:40:3\00")
// CPU-DAG: llvm.mlir.global internal constant @kiln_fmt_{{[0-9a-f_]+}}("pid (%d, %d, %d) idx (%lld) i: (operand 0) 0x%llx\0A\00")
// CPU-DAG: llvm.mlir.global internal constant @kiln_fmt_{{[0-9a-f_]+}}("pid (%d, %d, %d) i: (operand 1) 0x%llx\0A\00")
// CPU-LABEL: func.func private @dbg
// CPU: llvm.load {{.*}} : !llvm.ptr -> i64
// CPU: llvm.call %{{.*}}(%{{.*}}) : !llvm.ptr, (!llvm.ptr, !llvm.ptr, i32, i32, i32, i32) -> ()
// CPU: llvm.call @printf
// CPU: llvm.call @fflush
// NOHOOK-NOT: kiln_assert_hook

kiln.func @dbg(%x: !kiln.ptr<i32> {kiln.name = "x"}, %n: index {kiln.name = "n"}, %s: f32 {kiln.name = "s"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %t = kiln.load %v[%c0] : !kiln.view<1xi32> -> tensor<256xi32>
  %z = arith.constant dense<0> : tensor<256xi32>
  %ok = arith.cmpi sge, %t, %z : tensor<256xi32>
  kiln.assert %ok, "in range 0!" : tensor<256xi1>
  kiln.print "i: " %t, %s : tensor<256xi32>, f32 hex
  kiln.return
}

kiln.func @plain(%x: !kiln.ptr<i32> {kiln.name = "x"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %t = kiln.load %v[%c0] : !kiln.view<1xi32> -> tensor<256xi32>
  kiln.store %t, %v[%c0] : tensor<256xi32> -> !kiln.view<1xi32>
  kiln.return
}
