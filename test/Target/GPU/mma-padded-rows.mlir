// mma.sync operands get rows 16 bytes longer than the tile's (allocPaddedTile),
// so that ldmatrix's eight row addresses fall in different banks: at a pitch of
// a multiple of 128 bytes they would all hit the same four (an 8-way conflict).
// The bf16 GEMM example: A stages 64x128 (pitch 136), B stages 128x64 (pitch 72);
// cp.async writes and ldmatrix reads go through the strided views.
// RUN: kiln-opt %S/../../../examples/matmul_bf16.mlir --convert-kiln-to-gpu="chip=sm_80" | FileCheck %s
// CHECK-DAG: memref.reinterpret_cast {{.*}} sizes: [64, 128], strides: [136, 1] : memref<8704xi16
// CHECK-DAG: memref.reinterpret_cast {{.*}} sizes: [128, 64], strides: [72, 1] : memref<9216xi16
// CHECK-DAG: nvgpu.device_async_copy {{.*}} to memref<64x128xi16, strided<[136, 1]>
// CHECK-DAG: nvgpu.ldmatrix {{.*}} : memref<64x128xi16, strided<[136, 1]>, #gpu.address_space<workgroup>> -> vector<4x2xi16>
// CHECK-DAG: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = true} : memref<128x64xi16, strided<[72, 1]>
// wgmma operands keep their core-matrix / swizzled layouts: no padded rows.
// RUN: kiln-opt %S/../../../examples/matmul_bf16.mlir --convert-kiln-to-gpu="chip=sm_90a" | FileCheck %s --check-prefix=WGMMA
// WGMMA-NOT: strides: [136, 1]
// WGMMA-NOT: strides: [72, 1]
// Attention's key and value loads ([1, 64, 128] reshaped to [64, 128]): padded
// in 3-d, viewed in 2-d by the reshape; the key block is read through the
// deferred transpose (ldmatrix without .trans), not copied.
// RUN: env KILN_DUMP_IR=1 kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --target sm_90 --emit mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=ATT
// ATT-LABEL: IR Dump After ConvertKilnToGPU
// ATT: memref.reinterpret_cast {{.*}} sizes: [1, 64, 128], strides: [8704, 136, 1]
// ATT: memref.reinterpret_cast {{.*}} sizes: [64, 128], strides: [136, 1] : memref<1x64x128xi16, strided<[8704, 136, 1]>
// ATT-NOT: memref<128x64xi16, #gpu.address_space<workgroup>>
// ATT-LABEL: IR Dump After
// The example GEMM's shared memory: 70 KiB (64 KiB unpadded).
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_80 -o %t.kb && head -c 1024 %t.kb | FileCheck %s --check-prefix=SMEM
// SMEM: launch shared_bytes 71680
// Where the padded tiles do not fit, one pipeline stage goes before the
// padding: on an A100 (163 KiB per block) the square block-128 attention at 8
// warps runs one padded stage (102 KiB), not two unpadded (161 KiB). On the
// H200, 8-way ldmatrix conflicts cost 5-10x, one stage about 25%.
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --num-warps 8 --target sm_80 -o %t.a100.kb && head -c 1024 %t.a100.kb | FileCheck %s --check-prefix=A100
// A100: launch shared_bytes 104448
