// Gathers and scatters of view rows on the GPU move whole chunks of a row
// (docs/gpu.md, "Gathers and scatters"): a gather is one cp.async per chunk
// whose source size is the chunk's elements inside the view (0 for a row
// index outside it; cp.async zero-fills the rest, the zero padding), and a
// scatter one vector store per chunk, when the view's innermost stride is 1,
// the column offset is not negative and every row start is chunk-aligned
// (checked at run time); element by element otherwise. A gather with another
// padding is element by element.
// RUN: kiln-opt %s --convert-kiln-to-gpu="chip=sm_80" | FileCheck %s
// RUN: kilnc %s --kernel rows --target sm_90a --emit ptx -o - | FileCheck %s --check-prefix=PTX
// RUN: kilnc %s --kernel rows --target sm_80 --emit ptx -o %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_80 %t.ptx -o %t.cubin %}

// CHECK-LABEL: gpu.func @rows
// The gather: 16-byte copies (8 bf16) with a run-time source size.
// CHECK: nvgpu.device_async_copy {{.*}}, 8, %{{.*}} {bypassL1} : memref<?x?xi16, strided<[?, 1]>> to memref<16x64xi16
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.wait.group 0
// The scatter: 16-byte vector stores of whole chunks.
// CHECK: vector.load {{.*}} : memref<16x64xi16, {{.*}}>, vector<8xi16>
// CHECK: vector.store {{.*}} : memref<?x?xi16, strided<[?, 1]>>, vector<8xi16>
// CHECK-LABEL: gpu.func @padded
// CHECK-NOT: device_async_copy {{.*}} to memref<16x64xf32
// CHECK: gpu.return

// PTX: cp.async.cg.shared.global [%rd{{[0-9]+}}], [%rd{{[0-9]+}}], 16, %r{{[0-9]+}};
// PTX: st.global.v4.b32
kiln.func @rows(%x: !kiln.ptr<bf16> {kiln.name = "x"}, %idx: !kiln.ptr<i32> {kiln.name = "idx"},
                %y: !kiln.ptr<bf16> {kiln.name = "y"}, %r: index {kiln.name = "r"},
                %c: index {kiln.name = "c"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %pid = kiln.program_id x : i32
  %p = arith.index_cast %pid : i32 to index
  %c16 = arith.constant 16 : index
  %row0 = arith.muli %p, %c16 : index
  %vi = kiln.make_view %idx, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %i = kiln.load %vi[%row0] padding(-1 : i32) : !kiln.view<1xi32> -> tensor<16xi32>
  %vx = kiln.make_view %x, [%r, %c], [%c, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %t = kiln.gather %vx[%i, %c0] : !kiln.view<2xbf16>, tensor<16xi32> -> tensor<16x64xbf16>
  %vy = kiln.make_view %y, [%r, %c], [%c, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  kiln.scatter %t, %vy[%i, %c0] : tensor<16x64xbf16>, tensor<16xi32> -> !kiln.view<2xbf16>
  kiln.return
}

kiln.func @padded(%x: !kiln.ptr<f32> {kiln.name = "x"}, %idx: !kiln.ptr<i32> {kiln.name = "idx"},
                  %out: !kiln.ptr<f32> {kiln.name = "out"}, %r: index {kiln.name = "r"},
                  %c: index {kiln.name = "c"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %vi = kiln.make_view %idx, [%c16], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %i = kiln.load %vi[%c0] : !kiln.view<1xi32> -> tensor<16xi32>
  %vx = kiln.make_view %x, [%r, %c], [%c, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %t = kiln.gather %vx[%i, %c0] padding(1.0 : f32) : !kiln.view<2xf32>, tensor<16xi32> -> tensor<16x64xf32>
  %vo = kiln.make_view %out, [%c16, %c], [%c, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %t, %vo[%c0, %c0] : tensor<16x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// A gather that only feeds a wgmma dot is written in the core-matrix layout
// (allocLoadTile); with a non-zero padding it goes element by element, and
// those writes are fenced for the async proxy before the barrier that hands
// them to wgmma.
// RUN: kiln-opt %s --convert-kiln-to-gpu="chip=sm_90a" | FileCheck %s --check-prefix=CORE
// CORE-LABEL: gpu.func @padded_dot
// CORE: memref.store {{.*}} : memref<8x8x8x8xi16, strided<[64, 8, 512, 1]>
// CORE-NEXT: }
// CORE-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>
// CORE-NEXT: gpu.barrier
// CORE: nvvm.wgmma.mma_async
kiln.func @padded_dot(%x: !kiln.ptr<bf16> {kiln.name = "x"}, %idx: !kiln.ptr<i32> {kiln.name = "idx"},
                      %w: !kiln.ptr<bf16> {kiln.name = "w"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
                      %r: index {kiln.name = "r"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %vi = kiln.make_view %idx, [%c64], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %i = kiln.load %vi[%c0] : !kiln.view<1xi32> -> tensor<64xi32>
  %vx = kiln.make_view %x, [%r, %c64], [%c64, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %a = kiln.gather %vx[%i, %c0] padding(0.5 : bf16) : !kiln.view<2xbf16>, tensor<64xi32> -> tensor<64x64xbf16>
  %vw = kiln.make_view %w, [%c64, %c64], [%c64, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %b = kiln.load %vw[%c0, %c0] : !kiln.view<2xbf16> -> tensor<64x64xbf16>
  %d = kiln.dot %a, %b, %zero : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %vo = kiln.make_view %out, [%c64, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %d, %vo[%c0, %c0] : tensor<64x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
