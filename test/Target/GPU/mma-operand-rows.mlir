// mma.sync operands are read by ldmatrix, eight rows at one column: at a row
// pitch of a multiple of 128 bytes those eight addresses fall in the same four
// of the 32 banks (an 8-way conflict). Rows that are whole 128-byte lines get
// their 16-byte chunks XOR-swizzled by the row (allocXorTile: chunk c / 8 % 8
// of row r at chunk (c / 8 % 8) ^ (r % 8) of its line, no bytes added); other
// rows are 16 bytes longer (allocPaddedTile), and so are all of them under
// --no-swizzle (pass option swizzle=false).
//
// The bf16 GEMM example: A stages 64x128 and B stages 128x64, both swizzled,
// as rank-4 views (r / 8, r % 8, chunk, c % 8) that cp.async writes through;
// ldmatrix reads them by address (nvvm.ldmatrix), the address of plain rows
// with its bits 4-6 XORed.
// RUN: kiln-opt %S/../../../examples/matmul_bf16.mlir --convert-kiln-to-gpu="chip=sm_80" | FileCheck %s
// CHECK-DAG: memref.reinterpret_cast {{.*}} sizes: [8, 8, 16, 8], strides: [1024, 128, 8, 1] : memref<8192xi16
// CHECK-DAG: memref.reinterpret_cast {{.*}} sizes: [16, 8, 8, 8], strides: [512, 64, 8, 1] : memref<8192xi16
// CHECK-DAG: nvgpu.device_async_copy {{.*}} to memref<8x8x16x8xi16, strided<[1024, 128, 8, 1]>
// CHECK-DAG: nvgpu.device_async_copy {{.*}} to memref<16x8x8x8xi16, strided<[512, 64, 8, 1]>
// CHECK-DAG: nvvm.ldmatrix {{.*}} layout = #nvvm.mma_layout<row>, num = 4 : i32
// CHECK-DAG: nvvm.ldmatrix {{.*}} layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK-NOT: nvgpu.ldmatrix
//
// In the PTX, one xor per k step of A (by the step's chunk, 32 bytes apart), the
// warp tiles' offsets in the instruction; B's k steps are whole rows, so its
// addresses only add offsets.
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_80 --emit ptx -o - | FileCheck %s --check-prefix=PTX
// PTX: xor.b64 [[A1:%rd[0-9]+]], [[A0:%rd[0-9]+]], 32;
// PTX: ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{.*}}+4096];
// PTX: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{.*}}+2048];
// PTX: xor.b64 {{%rd[0-9]+}}, [[A0]], 64;
//
// Padded rows under --no-swizzle: A pitch 136, B pitch 72, read by nvgpu.ldmatrix
// through the strided views.
// RUN: kiln-opt %S/../../../examples/matmul_bf16.mlir --convert-kiln-to-gpu="chip=sm_80 swizzle=false" | FileCheck %s --check-prefix=PAD
// PAD-DAG: memref.reinterpret_cast {{.*}} sizes: [64, 128], strides: [136, 1] : memref<8704xi16
// PAD-DAG: memref.reinterpret_cast {{.*}} sizes: [128, 64], strides: [72, 1] : memref<9216xi16
// PAD-DAG: nvgpu.device_async_copy {{.*}} to memref<64x128xi16, strided<[136, 1]>
// PAD-DAG: nvgpu.ldmatrix {{.*}} : memref<64x128xi16, strided<[136, 1]>, #gpu.address_space<workgroup>> -> vector<4x2xi16>
// PAD-DAG: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = true} : memref<128x64xi16, strided<[72, 1]>
//
// wgmma operands keep their core-matrix / 128B-swizzled layouts.
// RUN: kiln-opt %S/../../../examples/matmul_bf16.mlir --convert-kiln-to-gpu="chip=sm_90a" | FileCheck %s --check-prefix=WGMMA
// WGMMA-NOT: strides: [136, 1]
// WGMMA-NOT: strides: [1024, 128, 8, 1]
// WGMMA-NOT: nvvm.ldmatrix
//
// Attention's key and value loads ([1, 64, 128] reshaped to [64, 128]) and its
// query: swizzled in 3-d, the reshape aliasing the same rank-4 view; the key
// block is read through the deferred transpose (ldmatrix without .trans), not
// copied.
// RUN: env KILN_DUMP_IR=1 kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --target sm_90 --emit mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=ATT
// ATT-LABEL: IR Dump After ConvertKilnToGPU
// ATT: memref.reinterpret_cast {{.*}} sizes: [8, 8, 16, 8], strides: [1024, 128, 8, 1]
// ATT-NOT: memref<64x128xi16, #gpu.address_space<workgroup>>
// ATT-NOT: memref<128x64xi16, #gpu.address_space<workgroup>>
// ATT-NOT: nvgpu.ldmatrix
// ATT-LABEL: IR Dump After
//
// The example GEMM's shared memory: 64 KiB (70 KiB with padded rows).
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_80 -o %t.kb && head -c 1024 %t.kb | FileCheck %s --check-prefix=SMEM
// SMEM: launch shared_bytes 65536
// RUN: kilnc %S/../../../examples/matmul_bf16.mlir --target sm_80 --no-swizzle -o %t.pad.kb && head -c 1024 %t.pad.kb | FileCheck %s --check-prefix=SMEMPAD
// SMEMPAD: launch shared_bytes 71680
//
// On an A100 (163 KiB per block) the square block-128 attention at 8 warps
// fits two swizzled stages (160 KiB); with padded rows it runs one stage
// (68 KiB: q, and the key and value blocks in the same bytes, a barrier
// between the scores' reads of the keys and the values' load): where padded
// tiles do not fit, a pipeline stage goes before the padding (on the H200,
// 8-way ldmatrix conflicts cost 5-10x, one stage about 25%).
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --num-warps 8 --target sm_80 -o %t.a100.kb && head -c 1024 %t.a100.kb | FileCheck %s --check-prefix=A100
// A100: launch shared_bytes 163892
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --num-warps 8 --target sm_80 --no-swizzle -o %t.a100pad.kb && head -c 1024 %t.a100pad.kb | FileCheck %s --check-prefix=A100PAD
// A100PAD: launch shared_bytes 69652
