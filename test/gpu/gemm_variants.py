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


def gemm_source(bm, bn, bk, out="f32"):
    """The example's kiln IR for a bm x bn block tile walking k by bk; with
    out="bf16" C is bf16 (the f32 sums rounded, as torch.matmul returns)."""
    text = open(os.path.join(ROOT, "examples", "matmul_bf16.mlir")).read()
    if out == "bf16":
        text = (text.replace('%c: !kiln.ptr<f32> {kiln.name = "c"}',
                             '%c: !kiln.ptr<bf16> {kiln.name = "c"}')
                .replace("!kiln.ptr<f32> -> !kiln.view<2xf32>",
                         "!kiln.ptr<bf16> -> !kiln.view<2xbf16>")
                .replace("  kiln.store %acc, %vc[%row, %col] : tensor<64x64xf32> -> "
                         "!kiln.view<2xf32>",
                         "  %acc16 = arith.truncf %acc : tensor<64x64xf32> to tensor<64x64xbf16>\n"
                         "  kiln.store %acc16, %vc[%row, %col] : tensor<64x64xbf16> -> "
                         "!kiln.view<2xbf16>")
                .replace("tensor<64x64xbf16>", f"tensor<{bm}x{bn}xbf16>"))
        assert "%acc16" in text and "ptr<f32>" not in text
    return (text.replace("64x64xf32", "@C@")
                .replace("tensor<64x128xbf16>", "@A@")
                .replace("tensor<128x64xbf16>", "@B@")
                .replace("@C@", f"{bm}x{bn}xf32")
                .replace("@A@", f"tensor<{bm}x{bk}xbf16>")
                .replace("@B@", f"tensor<{bk}x{bn}xbf16>")
                .replace("%bm = arith.constant 64", f"%bm = arith.constant {bm}")
                .replace("%bn = arith.constant 64", f"%bn = arith.constant {bn}")
                .replace("%bk = arith.constant 128", f"%bk = arith.constant {bk}"))
