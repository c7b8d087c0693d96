// Bad GPU input: a clear message and exit code 1, never a crash.
// RUN: not kilnc %s --target sm_70 2>&1 | FileCheck %s --check-prefix=ARCH
// RUN: not kilnc %s --target sm_85 2>&1 | FileCheck %s --check-prefix=ARCH85
// RUN: not kilnc %s --target sm_89 2>&1 | FileCheck %s --check-prefix=SMEM89 -DFILE=%s
// RUN: not kilnc %s --target sm_80 --num-warps 0 2>&1 | FileCheck %s --check-prefix=WARPS
// RUN: not kilnc %s --target sm_80 --num-stages 9 2>&1 | FileCheck %s --check-prefix=STAGES
// RUN: not kilnc %s --target sm_80 2>&1 | FileCheck %s --check-prefix=SMEM -DFILE=%s
// ARCH: error: unknown GPU target 'sm_70'; known: sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a, sm_100, sm_120
// ARCH85: error: unknown GPU target 'sm_85'; known: sm_80,
// WARPS: error: num_warps must be in [1, 32], not 0
// STAGES: error: num_stages must be in [1, 8], not 9
// SMEM: [[FILE]]:[[@LINE+2]]:1: error: kernel 'huge' needs 512 KiB of shared memory for its tiles; sm_80 allows 163 KiB per block: use smaller tiles
// SMEM89: [[FILE]]:[[@LINE+1]]:1: error: kernel 'huge' needs 512 KiB of shared memory for its tiles; sm_89 allows 99 KiB per block: use smaller tiles
kiln.func @huge(%x: !kiln.ptr<f32> {kiln.name = "x"}, %n: index {kiln.name = "n"}) attributes {grid_rank = 1} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %v[%c0] : !kiln.view<1xf32> -> tensor<65536xf32>
  %u = arith.addf %t, %t : tensor<65536xf32>
  kiln.store %u, %v[%c0] : tensor<65536xf32> -> !kiln.view<1xf32>
  kiln.return
}
