// The emulation target: kiln-emulate-gpu turns the GPU lowering's kernels
// into host functions calling the SIMT emulator (lib/Target/GPUEmu), and
// kilnc --target emu-sm_XY builds CPU bundles from them. Also pins the
// barrier the SIMT lowering puts between a scalar read of a shared tile
// (tensor.extract) and the loop's next iteration, which overwrites the tile
// (SYNC), and its absence when the tile is a pipelined stage (PIPE).
// RUN: kiln-opt %s --convert-kiln-to-gpu --kiln-emulate-gpu | FileCheck %s --check-prefix=EMU
// RUN: kiln-opt %s --convert-kiln-to-gpu --kiln-emulate-gpu=check-shared=0 | FileCheck %s --check-prefix=NOCHECK
// RUN: kiln-opt %s --convert-kiln-to-gpu=num-stages=1 --canonicalize | FileCheck %s --check-prefix=SYNC
// RUN: kiln-opt %s --convert-kiln-to-gpu --canonicalize | FileCheck %s --check-prefix=PIPE
// RUN: kiln-opt %s --convert-kiln-to-gpu=num-stages=3 --canonicalize | FileCheck %s --check-prefix=PIPE3
// RUN: kilnc %s --kernel scan --target emu-sm_80 -o %t.kb && head -c 512 %t.kb | FileCheck %s --check-prefix=BUNDLE
// RUN: not kilnc %s --kernel scan --target emu-sm_70 -o %t.kb 2>&1 | FileCheck %s --check-prefix=BAD

// NOCHECK-NOT: call @kiln_emu_shared_access
// NOCHECK: call @kiln_emu_run_block

// EMU-NOT: gpu.module
// EMU-DAG: func.func private @kiln_emu_thread_id() -> i32
// EMU-DAG: func.func private @kiln_emu_barrier()
// EMU-DAG: func.func private @kiln_emu_shared() -> i64
// EMU-DAG: func.func private @kiln_emu_cp_async(i64, i64, i64, i64, i64)
// EMU-DAG: func.func private @kiln_emu_mma_m16n8k16(i32, i32, i32, i32, i32, i32, i32, f32, f32, f32, f32, i64)
// EMU-DAG: func.func private @kiln_emu_shfl_xor_b32(i32, i32, i32) -> i32
// EMU-DAG: func.func private @kiln_emu_shared_access(i64, i32, i32, i64)
// EMU-LABEL: func.func private @mix(
// EMU-SAME: memref<1xi16>, %{{.*}}: memref<1xi16>, %{{.*}}: memref<1xf32>, %{{.*}}: memref<1xf32>, %{{.*}}: i64, %{{.*}}: i32
// EMU-NOT: gpu.
// EMU-NOT: nvvm.
// EMU-LABEL: func.func private @kiln_emu_thread_mix(%{{.*}}: !llvm.ptr,
// EMU: call @mix(
// EMU-LABEL: func.func @kiln_entry_mix({{.*}} attributes {kiln.kernel = "mix"}
// EMU: %[[FN:.*]] = constant @kiln_emu_thread_mix
// EMU: %[[T:.*]] = arith.constant 128 : i32
// EMU: call @kiln_emu_run_block(%[[FN]], {{.*}}, %[[T]],

// SYNC-LABEL: gpu.func @scan(
// SYNC: scf.for
// SYNC: gpu.barrier
// SYNC-NEXT: %[[V:.*]] = memref.load %{{.*}}[%c0] : memref<1xf32, #gpu.address_space<workgroup>>
// SYNC-NEXT: arith.addf %{{.*}}, %[[V]]
// SYNC-NEXT: gpu.barrier
// SYNC-NEXT: scf.yield

// Software pipelining (num-stages 2, the default): the scan's load is issued
// one iteration ahead into two rotating stage buffers; the prologue issues
// iteration 0, each iteration waits for its own copies, syncs, then issues
// the next into the stage the previous iteration read.
// PIPE-LABEL: gpu.func @scan(
// PIPE-SAME: kiln.shared_bytes = 36
// PIPE: nvgpu.device_async_copy
// PIPE: nvvm.cp.async.commit.group
// PIPE-NEXT: scf.for
// PIPE: nvvm.cp.async.wait.group 0
// PIPE-NEXT: gpu.barrier
// PIPE: nvgpu.device_async_copy
// PIPE: nvvm.cp.async.commit.group
// The stage read is rewritten only after the next iteration's first
// barrier, so the back edge needs none of its own (unlike SYNC).
// PIPE: %[[S:.*]] = memref.load %{{.*}}[%c0] : memref<1xf32, #gpu.address_space<workgroup>>
// PIPE-NEXT: arith.addf %{{.*}}, %[[S]]
// PIPE-NEXT: scf.yield
// PIPE3-LABEL: gpu.func @scan(
// PIPE3: nvvm.cp.async.commit.group
// PIPE3: nvvm.cp.async.commit.group
// PIPE3-NEXT: scf.for
// PIPE3: nvvm.cp.async.wait.group 1

// BUNDLE: code elf-shared-object
// BUNDLE: launch cpu-target emu-sm_80

// BAD: unknown GPU target 'sm_70'

kiln.func @mix(%a: !kiln.ptr<bf16> {kiln.name = "a"}, %b: !kiln.ptr<bf16> {kiln.name = "b"},
               %x: !kiln.ptr<f32> {kiln.name = "x"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
               %n: index {kiln.name = "n"}) attributes {grid_rank = 1} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %va = kiln.make_view %a, [%c64, %c32], [%c32, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vb = kiln.make_view %b, [%c32, %c64], [%c64, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vx = kiln.make_view %x, [%c64, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vo = kiln.make_view %out, [%c64, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %ta = kiln.load %va[%c0, %c0] : !kiln.view<2xbf16> -> tensor<64x32xbf16>
  %tb = kiln.load %vb[%c0, %c0] : !kiln.view<2xbf16> -> tensor<32x64xbf16>
  %tx = kiln.load %vx[%c0, %c0] : !kiln.view<2xf32> -> tensor<64x64xf32>
  %d = kiln.dot %ta, %tb, %tx : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
  %m = kiln.reduce max %d [1] : tensor<64x64xf32> -> tensor<64xf32>
  %mb = kiln.expand_dims %m [1] : tensor<64xf32> -> tensor<64x1xf32>
  %mm = kiln.broadcast %mb : tensor<64x1xf32> -> tensor<64x64xf32>
  %r = arith.subf %d, %mm : tensor<64x64xf32>
  kiln.store %r, %vo[%c0, %c0] : tensor<64x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

kiln.func @scan(%x: !kiln.ptr<f32>, %out: !kiln.ptr<f32>, %n: index) attributes {grid_rank = 1} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vo = kiln.make_view %out, [%c1], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f32 {
    %t = kiln.load %vx[%i] : !kiln.view<1xf32> -> tensor<1xf32>
    %e = tensor.extract %t[%c0] : tensor<1xf32>
    %a = arith.addf %acc, %e : f32
    scf.yield %a : f32
  }
  %st = kiln.splat %s : tensor<1xf32>
  kiln.store %st, %vo[%c0] : tensor<1xf32> -> !kiln.view<1xf32>
  kiln.return
}
