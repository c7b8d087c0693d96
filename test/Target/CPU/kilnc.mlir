// kilnc emits every stage of the one CPU pipeline.
// RUN: kilnc %s --target x86-64-avx512 --emit mlir | FileCheck %s --check-prefix=MLIR
// RUN: kilnc %s --target x86-64-avx512 --emit llvm | FileCheck %s --check-prefix=LLVM
// RUN: kilnc %s --target x86-64-avx512 --emit asm | FileCheck %s --check-prefix=ASM
// RUN: kilnc %s --target x86-64-avx2 --emit asm | FileCheck %s --check-prefix=AVX2
// RUN: kilnc %s --emit c-header | FileCheck %s --check-prefix=HEADER
// RUN: kilnc %s --target x86-64-avx512 -o %t.kiln && head -c 600 %t.kiln | FileCheck %s --check-prefix=BUNDLE
// RUN: kilnc %s --kiln-print-after-all -o /dev/null 2>&1 | FileCheck %s --check-prefix=DUMP
// RUN: env KILN_DUMP_IR=1 kilnc %s -o /dev/null 2>&1 | FileCheck %s --check-prefix=DUMP

// MLIR: llvm.func @kiln_entry_scale(%{{.*}}: !llvm.ptr, %{{.*}}: i32
// The code carries the manifest it was compiled for (the runtime compares).
// LLVM: @kiln_manifest = {{.*}}constant [{{[0-9]+}} x i8] c"kiln-bundle 1\0Aname scale\0Aentry kiln_entry_scale\0A{{.*}}arg x ptr f32\0Aarg a scalar f32\0Aarg n scalar i64\0Awrites x\0A\00"
// LLVM: define void @kiln_entry_scale(ptr
// LLVM: <16 x float>
// ASM: kiln_entry_scale:
// ASM: {{vmulps|vfmadd}}{{.*}}%zmm
// AVX2: {{vmulps|vfmadd}}{{.*}}%ymm
// AVX2-NOT: %zmm
// HEADER: static inline kiln_status kiln_load_scale(const char *path, kiln_kernel **out)
// HEADER: static inline kiln_status kiln_launch_scale(kiln_runtime *kiln_rt_, kiln_kernel *kiln_k_, float *x, float a, int64_t n, int64_t kiln_gx_, int64_t kiln_gy_, int64_t kiln_gz_)
// BUNDLE: KILNBNDL
// BUNDLE: kiln-bundle 1
// BUNDLE-NEXT: name scale
// BUNDLE-NEXT: entry kiln_entry_scale
// BUNDLE-NEXT: target x86-64
// BUNDLE-NEXT: features {{.*}}avx512f
// BUNDLE: arg x ptr f32
// BUNDLE-NEXT: arg a scalar f32
// BUNDLE-NEXT: arg n scalar i64
// DUMP: IR Dump After Canonicalizer
// DUMP: IR Dump After ConvertKilnToCPU
// DUMP: LLVM IR before optimization
// DUMP: LLVM IR after optimization
kiln.func @scale(%x: !kiln.ptr<f32> {kiln.name = "x"}, %a: f32 {kiln.name = "a"},
                 %n: index {kiln.name = "n"}) {
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %pid = kiln.program_id x : i32
  %p = arith.index_cast %pid : i32 to index
  %off = arith.muli %p, %c64 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %v[%off] : !kiln.view<1xf32> -> tensor<64xf32>
  %s = kiln.splat %a : tensor<64xf32>
  %r = arith.mulf %t, %s : tensor<64xf32>
  kiln.store %r, %v[%off] : tensor<64xf32> -> !kiln.view<1xf32>
  kiln.return
}
