"""bf16 GEMM kernels at other block shapes than the matmul_bf16 example: its
text with the tile constants replaced. The device check (check.py) checks and
benchmarks them; test_gpu_compile.py assembles them with ptxas."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (block m, n, k, warps, pipeline stages); the first is the example as is.
GEMM_VARIANTS = [(64, 64, 128, 4, 2), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3),
                 (128, 256, 64, 8, 3), (128, 256, 64, 8, 4)]


def gemm_name(bm, bn, bk, warps, stages):
    return f"gemm_bf16-{bm}x{bn}x{bk}-w{warps}-s{stages}"


def gemm_source(bm, bn, bk):
    """The example's kiln IR for a bm x bn block tile walking k by bk."""
    text = open(os.path.join(ROOT, "examples", "matmul_bf16.mlir")).read()
    return (text.replace("64x64xf32", "@C@")
                .replace("tensor<64x128xbf16>", "@A@")
                .replace("tensor<128x64xbf16>", "@B@")
                .replace("@C@", f"{bm}x{bn}xf32")
                .replace("@A@", f"tensor<{bm}x{bk}xbf16>")
                .replace("@B@", f"tensor<{bk}x{bn}xbf16>")
                .replace("%bm = arith.constant 64", f"%bm = arith.constant {bm}")
                .replace("%bn = arith.constant 64", f"%bn = arith.constant {bn}")
                .replace("%bk = arith.constant 128", f"%bk = arith.constant {bk}"))
