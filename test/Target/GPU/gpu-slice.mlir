// Tile slices (tensor.extract_slice) on the GPU (docs/gpu.md, "Tile
// slices"). DSA's pattern: key rows gathered once, B of q . kᵀ through a
// transpose, and their first 64 columns (the values) B of p . v. Only
// tensor-core dots read the slice, so it is a view of the gathered rows: no
// copy, one gather. Under mma.sync the rows are padded (72 elements) and the
// slice keeps that pitch, which ldmatrix reads; on sm_90a (64 rows: wgmma)
// the rows are core matrices and the slice is the first 8 column groups of
// them, at the same strides.
// The CPU takes the same view (its dots read any strides) and copies the
// slice the exponential reads.
// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s --check-prefix=CPU
// CPU-LABEL: func.func private @values
// CPU: memref.subview %{{.*}}[0, 0] [64, 64] [1, 1] : memref<64x96xi16> to memref<64x64xi16, strided<[96, 1]>>
// CPU: vector.load %subview
// CPU-LABEL: func.func private @copied
// CPU-NOT: memref.subview
// CPU: math.exp
// RUN: kiln-opt %s --convert-kiln-to-gpu="chip=sm_80" | FileCheck %s --check-prefix=SYNC
// RUN: kiln-opt %s --convert-kiln-to-gpu="chip=sm_90a" | FileCheck %s --check-prefix=CORE
// RUN: kilnc %s --kernel values --target sm_80 --emit ptx -o %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_80 %t.ptx -o %t.cubin %}
// RUN: kilnc %s --kernel values --target sm_90a --emit ptx -o %t90.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t90.ptx -o %t90.cubin %}

// SYNC-LABEL: gpu.func @values
// SYNC-NOT: device_async_copy {{.*}} to memref<64x64xi16
// SYNC: nvgpu.device_async_copy {{.*}} to memref<64x96xi16, strided<[104, 1]>
// SYNC-NOT: device_async_copy {{.*}} to memref<64x64xi16
// SYNC: memref.subview {{.*}}[0, 0] [64, 64] [1, 1] : memref<64x96xi16, strided<[104, 1]>, {{.*}}> to memref<64x64xi16, strided<[104, 1]>, {{.*}}>
// SYNC: nvgpu.ldmatrix %subview{{.*}} {numTiles = 4 : i32, transpose = true} : memref<64x64xi16, strided<[104, 1]>
// SYNC-LABEL: gpu.func @copied

// CORE-LABEL: gpu.func @values
// CORE: nvgpu.device_async_copy {{.*}} to memref<8x8x12x8xi16, strided<[64, 8, 512, 1]>
// CORE: memref.subview {{.*}}[0, 0, 0, 0] [8, 8, 8, 8] [1, 1, 1, 1] : memref<8x8x12x8xi16, strided<[64, 8, 512, 1]>, {{.*}}> to memref<8x8x8x8xi16, strided<[64, 8, 512, 1]>, {{.*}}>
// CORE: nvvm.wgmma.mma_async
// CORE-LABEL: gpu.func @copied
kiln.func @values(%q: !kiln.ptr<bf16> {kiln.name = "q"}, %kv: !kiln.ptr<bf16> {kiln.name = "kv"},
                  %idx: !kiln.ptr<i32> {kiln.name = "idx"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
                  %s: index {kiln.name = "s"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c96 = arith.constant 96 : index
  %zs = arith.constant dense<0.0> : tensor<64x64xf32>
  %vq = kiln.make_view %q, [%c64, %c96], [%c96, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %tq = kiln.load %vq[%c0, %c0] : !kiln.view<2xbf16> -> tensor<64x96xbf16>
  %vi = kiln.make_view %idx, [%c64], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %i = kiln.load %vi[%c0] padding(-1 : i32) : !kiln.view<1xi32> -> tensor<64xi32>
  %vkv = kiln.make_view %kv, [%s, %c96], [%c96, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %rows = kiln.gather %vkv[%i, %c0] : !kiln.view<2xbf16>, tensor<64xi32> -> tensor<64x96xbf16>
  %kt = kiln.trans %rows [1, 0] : tensor<64x96xbf16> -> tensor<96x64xbf16>
  %sc = kiln.dot %tq, %kt, %zs : tensor<64x96xbf16>, tensor<96x64xbf16> -> tensor<64x64xf32>
  %p = arith.truncf %sc : tensor<64x64xf32> to tensor<64x64xbf16>
  %v = tensor.extract_slice %rows[0, 0] [64, 64] [1, 1] : tensor<64x96xbf16> to tensor<64x64xbf16>
  %o = kiln.dot %p, %v, %zs : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %vo = kiln.make_view %out, [%c64, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %o, %vo[%c0, %c0] : tensor<64x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// A slice that something other than a dot reads is a copy, at its offsets.
// SYNC: %[[I:[0-9]+]] = arith.addi %{{.*}}, %c3 : index
// SYNC-NEXT: memref.load %{{.*}}[%{{.*}}, %[[I]]] : memref<16x32xf32
// SYNC-NEXT: memref.store {{.*}} : memref<16x8xf32
kiln.func @copied(%x: !kiln.ptr<f32> {kiln.name = "x"}, %out: !kiln.ptr<f32> {kiln.name = "out"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %vx = kiln.make_view %x, [%c16, %c32], [%c32, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %t = kiln.load %vx[%c0, %c0] : !kiln.view<2xf32> -> tensor<16x32xf32>
  %s = tensor.extract_slice %t[0, 3] [16, 8] [1, 1] : tensor<16x32xf32> to tensor<16x8xf32>
  %e = math.exp %s : tensor<16x8xf32>
  %vo = kiln.make_view %out, [%c16, %c32], [%c32, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %e, %vo[%c0, %c0] : tensor<16x8xf32> -> !kiln.view<2xf32>
  kiln.return
}
