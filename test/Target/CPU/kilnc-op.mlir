// `kilnc op NAME --key value`: the operator library from the CLI.
// RUN: kilnc op --list | FileCheck %s --check-prefix=LIST
// RUN: kilnc op block_sparse_attention --mask causal --head_dim 32 --emit kiln | FileCheck %s --check-prefix=BSA
// RUN: kilnc op conv --kh 7 --kw 7 --static.h 224 --emit kiln | FileCheck %s --check-prefix=CONV
// RUN: kilnc op embedding -o %t.kiln && head -c 400 %t.kiln | FileCheck %s --check-prefix=BUNDLE
// RUN: not kilnc op nope 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not kilnc op conv --kh x 2>&1 | FileCheck %s --check-prefix=BADINT
// RUN: not kilnc op conv --static.nope 1 2>&1 | FileCheck %s --check-prefix=BADSTATIC
// RUN: not kilnc op block_sparse_attention --mask diagonal 2>&1 | FileCheck %s --check-prefix=CHOICE
// RUN: not kilnc op dsa_topk --block 0 2>&1 | FileCheck %s --check-prefix=ZEROBLOCK
// RUN: not kilnc op dsa_sparse_attention --heads_block -4 2>&1 | FileCheck %s --check-prefix=NEGBLOCK
// RUN: not kilnc op block_sparse_attention --softcap 1e400 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not kilnc op conv --ph -1 2>&1 | FileCheck %s --check-prefix=PAD
// RUN: not kilnc op conv --sh 0 2>&1 | FileCheck %s --check-prefix=STRIDE
// RUN: not kilnc op dsa_indexer --causal 2 2>&1 | FileCheck %s --check-prefix=SWITCH
// RUN: not kilnc op conv --kh 3 --kh 5 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not kilnc op depthwise_conv2d --row_taps 2 2>&1 | FileCheck %s --check-prefix=SWITCH2
// RUN: not kilnc op conv --ph 4294967297 2>&1 | FileCheck %s --check-prefix=WIDE
// RUN: not kilnc op conv --kh 65536 --kw 65536 2>&1 | FileCheck %s --check-prefix=TAPS
// RUN: not kilnc op depthwise_conv2d --dw 1073741824 2>&1 | FileCheck %s --check-prefix=DWTAPS
// SWITCH2: error: parameter 'row_taps' of 'depthwise_conv2d' must be 0 or 1, got 2
// WIDE: error: parameter 'ph' of 'conv' must lie within (-2^31, 2^31), got 4294967297
// TAPS: error: conv: the kernel's taps or their offsets reach 2^31
// DWTAPS: error: depthwise_conv2d: the kernel's taps or their offsets reach 2^31
// RUN: kilnc op block_sparse_attention --block_kv 0 --emit kiln -o /dev/null
// RUN: kilnc op conv --help 2>/dev/null | FileCheck %s --check-prefix=HELP

// LIST: embedding: out[r, :] = weight[ids[r], :]
// LIST: block_sparse_attention:
// LIST: --mask (default none)
// LIST: dsa_topk:
// LIST: depthwise_conv2d:
// BSA: kiln.func @block_sparse_attention
// BSA-COUNT-2: kiln.dot {{.*}} : tensor<64x32xf32>, tensor<32x64xf32> -> tensor<64x64xf32>
// CONV: kiln.func @conv
// CONV: arith.constant 224 : i64
// BUNDLE: kiln-bundle 1
// BUNDLE-NEXT: name embedding
// UNKNOWN: error: no operator named 'nope'
// BADINT: error: parameter 'kh' of 'conv' must be an integer, got 'x'
// BADSTATIC: error: static.nope: 'conv' has no integer argument named 'nope'
// ZEROBLOCK: error: parameter 'block' of 'dsa_topk' must be positive, got 0
// NEGBLOCK: error: parameter 'heads_block' of 'dsa_sparse_attention' must be positive, got -4
// RANGE: error: parameter 'softcap' of 'block_sparse_attention' is out of range, got '1e400'
// PAD: error: parameter 'ph' of 'conv' must be >= 0, got -1
// STRIDE: error: parameter 'sh' of 'conv' must be positive, got 0
// SWITCH: error: parameter 'causal' of 'dsa_indexer' must be 0 or 1, got 2
// TWICE: error: --kh is given twice
// HELP: conv:
// HELP: --kh (default 3) kernel height
// CHOICE: error: parameter 'mask' of 'block_sparse_attention' must be one of none, causal, sliding_window, prefix_lm, document; got 'diagonal'
