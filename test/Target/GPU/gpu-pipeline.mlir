// The NVIDIA pipeline: tensor-core dot, cp.async loads, warp-shuffle
// reductions and the dynamic shared-memory window, for sm_80 and sm_90a.
// RUN: kilnc %s --target sm_80 --emit ptx | FileCheck %s --check-prefixes=PTX,SM80,MMA
// RUN: kilnc %s --target sm_90a --emit ptx | FileCheck %s --check-prefixes=PTX,SM90,WGMMA
// wgmma needs sm_90a: plain sm_90 keeps mma.sync.
// RUN: kilnc %s --target sm_90 --emit ptx | FileCheck %s --check-prefix=MMA
// Two warpgroups split the 64 columns: m64n32k16 each.
// RUN: kilnc %s --target sm_90a --num-warps 8 --emit ptx | FileCheck %s --check-prefix=WG8
// WG8: wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16
// RUN: kilnc %s --target sm_90a --num-warps 8 -o %t.kb && head -c 512 %t.kb | FileCheck %s --check-prefix=BUNDLE
// RUN: kiln-opt %s --convert-kiln-to-gpu | FileCheck %s --check-prefix=IR
// The bf16 GEMM example: 16-byte cp.async pipelined two deep, ldmatrix
// fragments, warp-tiled mma.sync, vector stores of the f32 result.
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_80 --emit ptx | FileCheck %s --check-prefix=GEMM
// On sm_90a both operand loads feed only the dot, so they write wgmma's
// layout in place: no shared-to-shared copy (ld.shared.v4, then st.shared.v4)
// before the wgmma. (The swizzled stages' element path stores 16-byte chunks
// it read element by element from global memory.)
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_90a --emit ptx | FileCheck %s --check-prefix=GEMM90
// GEMM90: cp.async.cg.shared.global [{{.*}}], [{{.*}}], 16
// GEMM90-NOT: ld.shared.v4
// GEMM90: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// On sm_90a the loads go by TMA when the views allow it (cp.async else).
// The views are made from the arguments, so the runtime encodes their tensor
// maps at launch: the manifest says how (`tensor_map` lines: kind, element
// bytes, pointer argument, rank, tile rows and columns, the view's sizes and
// strides as postfix expressions of the arguments), and the kernel takes
// them as 128-byte parameters after an i32 of flags (bit i: map i usable).
// No program builds a map: no scratch, no tensormap.replace, no fences.
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_90a -o %t.host.kb && head -c 700 %t.host.kb | FileCheck %s --check-prefix=HOSTMAPS
// HOSTMAPS-NOT: launch scratch_bytes
// HOSTMAPS: arg k scalar i64
// HOSTMAPS-NEXT: writes c
// HOSTMAPS-NEXT: tensor_map swizzled 2 0 2 64 128 a3 a5 a5 1
// HOSTMAPS-NEXT: tensor_map swizzled 2 1 2 128 64 a5 a4 a4 1
// HOSTMAPS-NEXT: tensor_map plain 4 2 2 64 64 a3 a4 a4 1
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_90a --emit ptx | FileCheck %s --check-prefixes=HOSTPTX,HOSTTMA
// HOSTPTX: .param .u32 matmul_bf16_param_6,
// HOSTPTX-COUNT-3: .param .align 64 .b8 matmul_bf16_param_{{[7-9]}}[128]
// HOSTPTX: cvta.param.u64
// HOSTPTX-NOT: tensormap.replace
// HOSTPTX-NOT: fence.proxy.tensormap
// HOSTTMA-DAG: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// HOSTTMA-DAG: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
// With --device-maps, thread 0 builds two tensor maps in the program's
// scratch, each stage has an mbarrier, a fill is arrive.expect_tx plus
// boxes; an iteration waits on its stage's phase parity. The example's tiles
// have rows of 128 bytes or more (A 64 x 128, B 128 x 64 bf16): their stages
// take the 128B swizzle, one 2-d box of 64 columns per column slab (A two, B
// one) and descriptors of layout type 1 (bit 62). With --no-swizzle they are
// core-matrix tiles, one 3-d box each (8 columns, all rows, the column
// chunks).
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_90a --device-maps --emit ptx | FileCheck %s --check-prefix=TMA
// TMA: tensormap.replace.tile.global_address.shared::cta.b1024.b64
// TMA: tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [{{.*}}], 3;
// TMA: tensormap.replace.tile.fill_mode.shared::cta.b1024.b32
// The map is built in shared memory, then copied to the global scratch.
// TMA-COUNT-8: st.global.v4.b32
// TMA: fence.proxy.tensormap::generic.release.gpu;
// TMA: fence.proxy.tensormap::generic.acquire.gpu [{{.*}}], 128;
// TMA: mbarrier.init.shared.b64
// TMA: mbarrier.arrive.expect_tx.shared.b64
// TMA-COUNT-3: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// TMA: or.b64 {{.*}}, 4611686293305360384;
// TMA: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// TMA: mbarrier.try_wait.parity.shared.b64
// TMA: mbarrier.inval.shared.b64
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_90a --no-swizzle --device-maps --emit ptx | FileCheck %s --check-prefix=NOSWIZZLE
// Core-matrix maps stay built on the device (their chunk dimension's stride
// is below the rows'; see addHostMap): the C store's map is encoded.
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_90a --no-swizzle -o %t.core.kb && head -c 700 %t.core.kb | FileCheck %s --check-prefix=COREMAPS
// COREMAPS: launch scratch_bytes 256
// COREMAPS-NOT: tensor_map core
// COREMAPS: tensor_map plain 4 2 2 64 64 a3 a4 a4 1
// NOSWIZZLE: tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [{{.*}}], 0;
// NOSWIZZLE: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// NOSWIZZLE-NOT: cp.async.bulk.tensor.2d.shared::cluster.global
// The C tile goes out by one TMA store (a third tensor map, 128 bytes of
// scratch each). Nothing after the store reads memory, so thread 0 waits
// only until the box has been read out of shared memory (the kernel's end
// completes the writes), before the block's barrier.
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_90a --device-maps -o %t.mm.kb && head -c 512 %t.mm.kb | FileCheck %s --check-prefix=SCRATCH
// SCRATCH: launch scratch_bytes 384
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_90a --device-maps --emit ptx | FileCheck %s --check-prefix=TMASTORE
// TMASTORE: wgmma.mma_async
// TMASTORE: fence.proxy.tensormap::generic.release.gpu;
// TMASTORE: fence.proxy.tensormap::generic.acquire.gpu
// TMASTORE: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
// TMASTORE-NEXT: cp.async.bulk.commit_group;
// TMASTORE-NEXT: cp.async.bulk.wait_group.read 0;
// TMASTORE-NOT: fence.proxy.async.global
// A store that something after it reads back (or writes again) waits for the
// writes and fences them for the generic proxy; the last store waits for the
// read alone.
// RUN: sed 's/^  kiln.return/  %%back = kiln.load %%vc[%%row, %%col] : !kiln.view<2xf32> -> tensor<64x64xf32>\n  kiln.store %%back, %%vc[%%row, %%col] : tensor<64x64xf32> -> !kiln.view<2xf32>\n  kiln.return/' %S/../../../examples/matmul_bf16.mlir > %t.readback.mlir
// RUN: kilnc %t.readback.mlir --target sm_90a --device-maps --emit ptx | FileCheck %s --check-prefix=READBACK
// READBACK: cp.async.bulk.wait_group 0;
// READBACK-NEXT: fence.proxy.async.global;
// READBACK: cp.async.bulk.wait_group.read 0;
// READBACK-NOT: fence.proxy.async.global
// RUN: sed 's/^  kiln.return/  kiln.store %%acc, %%vc[%%row, %%col] : tensor<64x64xf32> -> !kiln.view<2xf32>\n  kiln.return/' %S/../../../examples/matmul_bf16.mlir > %t.twice.mlir
// RUN: kilnc %t.twice.mlir --target sm_90a --device-maps --emit ptx | FileCheck %s --check-prefix=READBACK
// TMASTORE: st.global.v4
// Plain sm_90 has neither wgmma nor TMA (tensormap.replace is sm_90a).
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_90 --emit ptx | FileCheck %s --check-prefix=NOTMA
// NOTMA-NOT: cp.async.bulk.tensor
// NOTMA-NOT: tensormap
// GEMM-DAG: cp.async.cg.shared.global [{{.*}}], [{{.*}}], 16
// GEMM-DAG: cp.async.wait_group {{[[:space:]]*}}0;
// GEMM-DAG: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// GEMM-DAG: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// GEMM-DAG: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// GEMM-DAG: st.global.v4.b32

// SM80: .target sm_80
// SM90: .target sm_90a
// PTX: .extern .shared .align 1024 .b8 __kiln_smem[]
// PTX-LABEL: .entry mix(
// PTX-DAG: .maxntid
// PTX-DAG: cp.async.cg.shared.global [{{.*}}], [{{.*}}], 16
// PTX-DAG: cp.async.ca.shared.global
// PTX-DAG: cp.async.wait_group 0
// MMA-DAG: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// MMA-DAG: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// B's fragments, two 8-column tiles per ldmatrix:
// MMA-DAG: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// The operand loads write the core-matrix layout (no shared-to-shared
// copy), then K = 32 takes two m64n64k16 steps between one fence and one
// wait; A is K-major (imm-trans-a 0), B N-major (imm-trans-b 1).
// WGMMA-NOT: st.shared.v4
// WGMMA: wgmma.fence.sync.aligned
// WGMMA: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 0, 1;
// WGMMA: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 0, 1;
// WGMMA-NOT: wgmma.mma_async
// WGMMA: wgmma.commit_group.sync.aligned
// WGMMA: wgmma.wait_group.sync.aligned {{[[:space:]]*}}0
// PTX-DAG: shfl.sync.bfly.b32
// PTX-DAG: bar.sync 0

// BUNDLE: target sm_90a
// BUNDLE: code ptx
// BUNDLE: launch num_warps 8
// BUNDLE: launch shared_bytes {{[1-9][0-9]*}}
// BUNDLE: arg a ptr bf16

// IR: gpu.module @kiln_gpu
// IR: memref.global "public" @__kiln_smem : memref<0xi8, #gpu.address_space<workgroup>>
// IR: gpu.func @mix(%{{.*}}: memref<1xi16>, %{{.*}}: memref<1xi16>, %{{.*}}: memref<1xf32>, %{{.*}}: memref<1xf32>, %{{.*}}: i64) kernel
// IR: memref.view
// IR: nvgpu.device_async_copy
// IR: nvvm.mma.sync
// IR: gpu.shuffle xor
// IR: gpu.barrier

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
// A loop whose body begins with a pipelined load syncs at that load (its
// stage's wait and barrier): what the body reads last without a barrier
// (softmax's chunk sum, broadcast from shared memory) needs none on the back
// edge, only after the loop.
// RUN: kiln-opt %S/../../../examples/softmax.mlir '--convert-kiln-to-gpu=chip=sm_90a' | FileCheck %s --check-prefix=BACKEDGE
// BACKEDGE: nvvm.cp.async.wait.group 0
// BACKEDGE-NEXT: gpu.barrier
// BACKEDGE: arith.subf %arg{{[0-9]+}}, %{{[0-9]+}} : f32
// BACKEDGE-NEXT: math.exp
// BACKEDGE-NEXT: arith.mulf
// BACKEDGE-NEXT: arith.addf
// BACKEDGE-NEXT: scf.yield {{.*}} : f32, f32
// BACKEDGE-NEXT: }
// BACKEDGE-NEXT: gpu.barrier
