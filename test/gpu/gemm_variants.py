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


# The grouped program order: the launch grid stays (cdiv(n, bn), cdiv(m, bm)),
# but program (x, y) takes the tile of linear id x + y * gx in Triton's
# GROUP_M order: GROUP row blocks walked column by column, so the programs
# resident at once share A rows and B columns in L2.
GROUP = 8
_PIDS = """  %pn = kiln.program_id x : i32
  %pm = kiln.program_id y : i32
  %pn_i = arith.index_cast %pn : i32 to index
  %pm_i = arith.index_cast %pm : i32 to index
"""
_GROUPED_PIDS = f"""  %px = kiln.program_id x : i32
  %py = kiln.program_id y : i32
  %px_i = arith.index_cast %px : i32 to index
  %py_i = arith.index_cast %py : i32 to index
  %gbm = arith.constant @BM@ : index
  %gbn = arith.constant @BN@ : index
  %group = arith.constant {GROUP} : index
  %g1 = arith.constant 1 : index
  %mt0 = arith.addi %m, %gbm : index
  %mt1 = arith.subi %mt0, %g1 : index
  %tiles_m = arith.divui %mt1, %gbm : index
  %nt0 = arith.addi %n, %gbn : index
  %nt1 = arith.subi %nt0, %g1 : index
  %tiles_n = arith.divui %nt1, %gbn : index
  %lin0 = arith.muli %py_i, %tiles_n : index
  %lin = arith.addi %lin0, %px_i : index
  %per_group = arith.muli %group, %tiles_n : index
  %group_id = arith.divui %lin, %per_group : index
  %first_m = arith.muli %group_id, %group : index
  %left_m = arith.subi %tiles_m, %first_m : index
  %group_m = arith.minui %left_m, %group : index
  %in_group = arith.remui %lin, %per_group : index
  %off_m = arith.remui %in_group, %group_m : index
  %pm_i = arith.addi %first_m, %off_m : index
  %pn_i = arith.divui %in_group, %group_m : index
"""


def gemm_source(bm, bn, bk, out="f32", grouped=False):
    """The example's kiln IR for a bm x bn block tile walking k by bk; with
    out="bf16" C is bf16 (the f32 sums rounded, as torch.matmul returns);
    `grouped`: the GROUP_M program order (same launch grid)."""
    text = open(os.path.join(ROOT, "examples", "matmul_bf16.mlir")).read()
    if grouped:
        assert _PIDS in text
        text = text.replace(_PIDS, _GROUPED_PIDS.replace("@BM@", str(bm))
                            .replace("@BN@", str(bn)))
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
