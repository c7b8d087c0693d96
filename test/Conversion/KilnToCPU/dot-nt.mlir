// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s
// RUN: kiln-opt %s --convert-kiln-to-cpu="bf16-dot=1" | FileCheck %s --check-prefix=PAIRS

// dot(q, trans(x)) with x gathered rows [64, 256] and q [16, 256]: K (256)
// is long against q's rows (16), so the transpose is not made. Each output
// element is a dot product of a row of q and a row of x, both read along K
// in vectors: register blocks of 4 x 4 accumulators (32 zmm), a sum across
// lanes per element at the end of the K loop.
// CHECK-LABEL: func.func private @nt
// CHECK-NOT: vector.shuffle
// CHECK: scf.for %{{.*}} = %{{.*}} to %c256{{.*}} step %c16{{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK-NOT: vector.shuffle
// CHECK: vector.fma
// CHECK-NOT: vector.shuffle
// CHECK: vector.reduction <add>, %{{.*}} fastmath<reassoc> : vector<16xf32> into f32
// CHECK-NOT: vector.shuffle
// CHECK: return
kiln.func @nt(%q: !kiln.ptr<f32>, %kv: !kiln.ptr<f32>, %ix: !kiln.ptr<i32>, %o: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %c256 = arith.constant 256 : index
  %vq = kiln.make_view %q, [%c16, %c256], [%c256, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vkv = kiln.make_view %kv, [%n, %c256], [%c256, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vi = kiln.make_view %ix, [%c64], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %vo = kiln.make_view %o, [%c16, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %tq = kiln.load %vq[%c0, %c0] : !kiln.view<2xf32> -> tensor<16x256xf32>
  %idx = kiln.load %vi[%c0] : !kiln.view<1xi32> -> tensor<64xi32>
  %x = kiln.gather %vkv[%idx, %c0] : !kiln.view<2xf32>, tensor<64xi32> -> tensor<64x256xf32>
  %xt = kiln.trans %x [1, 0] : tensor<64x256xf32> -> tensor<256x64xf32>
  %z = arith.constant dense<0.0> : tensor<16x64xf32>
  %s = kiln.dot %tq, %xt, %z : tensor<16x256xf32>, tensor<256x64xf32> -> tensor<16x64xf32>
  kiln.store %s, %vo[%c0, %c0] : tensor<16x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// K = 64 against 16 rows: the transpose is made (8 x 8 blocks of
// shuffles) and the usual micro-kernel reads it.
// CHECK-LABEL: func.func private @short
// CHECK: vector.shuffle
// CHECK-NOT: vector.reduction
// CHECK: return
kiln.func @short(%q: !kiln.ptr<f32>, %kv: !kiln.ptr<f32>, %ix: !kiln.ptr<i32>, %o: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %vq = kiln.make_view %q, [%c16, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vkv = kiln.make_view %kv, [%n, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vi = kiln.make_view %ix, [%c64], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %vo = kiln.make_view %o, [%c16, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %tq = kiln.load %vq[%c0, %c0] : !kiln.view<2xf32> -> tensor<16x64xf32>
  %idx = kiln.load %vi[%c0] : !kiln.view<1xi32> -> tensor<64xi32>
  %x = kiln.gather %vkv[%idx, %c0] : !kiln.view<2xf32>, tensor<64xi32> -> tensor<64x64xf32>
  %xt = kiln.trans %x [1, 0] : tensor<64x64xf32> -> tensor<64x64xf32>
  %z = arith.constant dense<0.0> : tensor<16x64xf32>
  %s = kiln.dot %tq, %xt, %z : tensor<16x64xf32>, tensor<64x64xf32> -> tensor<16x64xf32>
  kiln.store %s, %vo[%c0, %c0] : tensor<16x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// bf16 operands: both widened to f32 once (sequential conversions, no
// transpose), then the same dot products. Where vdpbf16ps takes bf16
// (bf16-dot), the transpose is made for its interleaved pairs.
// CHECK-LABEL: func.func private @nt_bf16
// CHECK-NOT: vector.shuffle
// CHECK: arith.extf %{{.*}} : vector<16xbf16> to vector<16xf32>
// CHECK-NOT: vector.shuffle
// CHECK: arith.extf %{{.*}} : vector<16xbf16> to vector<16xf32>
// CHECK-NOT: vector.shuffle
// CHECK: vector.reduction <add>
// CHECK: return
// PAIRS-LABEL: func.func private @nt_bf16
// PAIRS: vector.shuffle
// PAIRS-NOT: vector.reduction
// PAIRS: return
kiln.func @nt_bf16(%q: !kiln.ptr<bf16>, %kv: !kiln.ptr<bf16>, %ix: !kiln.ptr<i32>, %o: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %c256 = arith.constant 256 : index
  %vq = kiln.make_view %q, [%c16, %c256], [%c256, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vkv = kiln.make_view %kv, [%n, %c256], [%c256, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vi = kiln.make_view %ix, [%c64], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %vo = kiln.make_view %o, [%c16, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %tq = kiln.load %vq[%c0, %c0] : !kiln.view<2xbf16> -> tensor<16x256xbf16>
  %idx = kiln.load %vi[%c0] : !kiln.view<1xi32> -> tensor<64xi32>
  %x = kiln.gather %vkv[%idx, %c0] : !kiln.view<2xbf16>, tensor<64xi32> -> tensor<64x256xbf16>
  %xt = kiln.trans %x [1, 0] : tensor<64x256xbf16> -> tensor<256x64xbf16>
  %z = arith.constant dense<0.0> : tensor<16x64xf32>
  %s = kiln.dot %tq, %xt, %z : tensor<16x256xbf16>, tensor<256x64xbf16> -> tensor<16x64xf32>
  kiln.store %s, %vo[%c0, %c0] : tensor<16x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
