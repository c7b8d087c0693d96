// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s --check-prefix=FMA
// RUN: kiln-opt %s --convert-kiln-to-cpu="bf16-dot=1" | FileCheck %s --check-prefix=PAIRS
// RUN: kilnc %s --target x86-64-avx512-bf16 --emit asm | FileCheck %s --check-prefix=ASM
// RUN: kilnc %s --target x86-64-avx512 --emit asm | FileCheck %s --check-prefix=NOBF16
// RUN: kilnc %s --target x86-64-avx512-bf16 -o %t.kiln && head -c 600 %t.kiln | FileCheck %s --check-prefix=BUNDLE

// A bf16 dot with an odd K (33) and f32 accumulation.
//
// Without bf16-dot, both operands are widened to f32 once, before the
// micro-kernel, whose k loop then converts nothing: plain loads of B's rows,
// a broadcast of A's element, FMAs.
// FMA-LABEL: func.func private @dotbf
// FMA: arith.extf {{.*}} : bf16 to f32
// FMA: memref.store {{.*}} : memref<8x33xf32>
// FMA: arith.extf {{.*}} : vector<16xbf16> to vector<16xf32>
// FMA: vector.store {{.*}} : memref<33x64xf32>, vector<16xf32>
// FMA: scf.for {{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// FMA-NOT: arith.extf
// FMA: vector.fma
// FMA-NOT: arith.extf
// FMA: scf.yield

// With bf16-dot (AVX512-BF16), B's rows are interleaved in pairs along K
// once, each step of the k loop takes two k, A's pair is one
// broadcast 32-bit word, and the odd last k is one FMA step after the loop.
// PAIRS-LABEL: func.func private @dotbf
// PAIRS: vector.shuffle {{.*}} [0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31] : vector<16xi16>, vector<16xi16>
// PAIRS: vector.store {{.*}} : memref<16x128xi16>, vector<32xi16>
// PAIRS: scf.for {{.*}} iter_args({{.*}}) -> (vector<16xf32>,
// PAIRS: vector.load {{.*}} : memref<16x128xi16>, vector<32xi16>
// PAIRS: vector.load {{.*}} : memref<8x33xi16>, vector<2xi16>
// PAIRS: vector.bitcast {{.*}} : vector<2xi16> to vector<1xi32>
// PAIRS: vector.broadcast {{.*}} : i32 to vector<16xi32>
// PAIRS: llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"({{.*}}) : (vector<16xf32>, vector<32xbf16>, vector<32xbf16>) -> vector<16xf32>
// PAIRS-NOT: vector.fma
// PAIRS: scf.yield
// PAIRS: arith.extf {{.*}} : vector<16xbf16> to vector<16xf32>
// PAIRS: vector.fma
// ASM: vdpbf16ps {{.*}}%zmm
// NOBF16-NOT: vdpbf16ps
// NOBF16: vfmadd{{.*}}%zmm
// NOBF16-NOT: vdpbf16ps
// BUNDLE: features {{.*}}avx512bf16
kiln.func @dotbf(%a: !kiln.ptr<bf16>, %c: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %va = kiln.make_view %a, [%n, %n], [%n, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vc = kiln.make_view %c, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %zero = arith.constant dense<0.0> : tensor<8x64xf32>
  %ta = kiln.load %va[%c0, %c0] : !kiln.view<2xbf16> -> tensor<8x33xbf16>
  %tb = kiln.load %va[%c0, %c0] : !kiln.view<2xbf16> -> tensor<33x64xbf16>
  %d = kiln.dot %ta, %tb, %zero : tensor<8x33xbf16>, tensor<33x64xbf16> -> tensor<8x64xf32>
  kiln.store %d, %vc[%c0, %c0] : tensor<8x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
