// Bad GPU input: a clear message and exit code 1, never a crash.
// RUN: not kilnc %s --target sm_70 2>&1 | FileCheck %s --check-prefix=ARCH
// RUN: not kilnc %s --target sm_80 --num-warps 0 2>&1 | FileCheck %s --check-prefix=WARPS
// RUN: not kilnc %s --target sm_80 --num-stages 9 2>&1 | FileCheck %s --check-prefix=STAGES
// RUN: not kilnc %s --target sm_80 2>&1 | FileCheck %s --check-prefix=SMEM -DFILE=%s
// ARCH: error: unknown GPU target 'sm_70': kiln supports sm_80 and newer
// WARPS: error: num_warps must be in [1, 32], not 0
// STAGES: error: num_stages must be in [1, 8], not 9
// SMEM: [[FILE]]:[[@LINE+1]]:1: error: kernel 'huge' needs 512 KiB of shared memory for its tiles; sm_80 allows 163 KiB per block: use smaller tiles
kiln.func @huge(%x: !kiln.ptr<f32> {kiln.name = "x"}, %n: index {kiln.name = "n"}) attributes {grid_rank = 1} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %v[%c0] : !kiln.view<1xf32> -> tensor<65536xf32>
  %u = arith.addf %t, %t : tensor<65536xf32>
  kiln.store %u, %v[%c0] : tensor<65536xf32> -> !kiln.view<1xf32>
  kiln.return
}
