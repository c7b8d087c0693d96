"""ldmatrix bank conflicts on the mma.sync path, counted by the SIMT emulator.

With KILN_EMU_BANK_CONFLICTS=fail an ldmatrix matrix that takes more than
one shared-memory wavefront fails the launch (the emulator aborts, so each
case runs in a child process). mma.sync operands of whole 128-byte rows are
XOR-swizzled by default and padded under KILN_SWIZZLE=0 (docs/gpu.md,
"Operand rows"): both must be read conflict-free, and right, on a pipelined
bf16 GEMM, the block-sparse attention (query, key and value tiles), DSA's
sparse attention (its probabilities too), an fp8 GEMM (operands decoded
to bf16 by elementwise ops) and operands that stores and elementwise ops
also read. Ragged sizes, poisoned outputs, float64 references. That
plain rows do conflict (8 wavefronts) is the emulator's unit test's
(test/unit/GpuEmulatorTest.cpp). Runs in every pytest suite (the target is
set per case)."""
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

# A pipelined GEMM of 64x64 blocks, 64 deep (A and B stages of 128-byte
# rows): examples/python/matmul.py's kernel at one of its configurations.
KERNEL = """
import numpy as np
import kiln
from kiln.frontend import fp8_value
from conftest import assert_close, from_bf16_bits, to_bf16_bits
from matmul import matmul_kernel

gemm = matmul_kernel.fn  # (not autotuned: BM = BN = BK = 64 below)
"""

GEMM = KERNEL + """
rng = np.random.default_rng(SEED)
m, n, k = 100, 70, 200
abits = to_bf16_bits(rng.standard_normal((m, k)))
bbits = to_bf16_bits(rng.standard_normal((k, n)))
c = np.full((m, n), np.nan, np.float32)
gemm[(kiln.cdiv(n, 64), kiln.cdiv(m, 64))](kiln.bf16(abits), kiln.bf16(bbits), c, m, n, k,
                                          BM=64, BN=64, BK=64)
ref = from_bf16_bits(abits).astype(np.float64) @ from_bf16_bits(bbits).astype(np.float64)
assert_close(c, ref, 1e-5, 1e-4)
print("ok")
"""

ATTENTION = """
import numpy as np
import kiln
from conftest import assert_close, dense_reference, from_bf16_bits, to_bf16_bits

rng = np.random.default_rng(SEED)
B, H, S, D = 1, 2, 150, HEAD_DIM
bits = [to_bf16_bits(rng.standard_normal((B, H, S, D))) for _ in range(3)]
x = [from_bf16_bits(b) for b in bits]
causal = lambda b, h, qi, ki: ki <= qi
mask = kiln.ops.block_mask(causal, B, H, S, S)
out, lse = kiln.ops.block_sparse_attention(*[kiln.bf16(b) for b in bits], mask, "causal")
ro, rl = dense_reference(*x, causal, 1 / np.sqrt(D))
assert_close(out, ro, 2e-2, 1e-2)
assert_close(lse, rl, 1e-4, 1e-4)
print("ok")
"""

DSA = """
import numpy as np
import kiln
from conftest import assert_close, from_bf16_bits, to_bf16_bits

rng = np.random.default_rng(SEED)
Sq, Hq, Skv, Dqk, Dv, topk = 2, 32, 90, 192, 128, 50
qb = to_bf16_bits(rng.standard_normal((Sq, Hq, Dqk)))
kvb = to_bf16_bits(rng.standard_normal((Skv, Dqk)))
q, kv = from_bf16_bits(qb).astype(np.float64), from_bf16_bits(kvb).astype(np.float64)
idx = np.full((Sq, topk), -1, np.int32)
idx[0, :50] = rng.choice(Skv, 50, replace=False)
idx[1, :23] = rng.choice(Skv, 23, replace=False)
out, lse = kiln.ops.dsa_sparse_attention(kiln.bf16(qb), kiln.bf16(kvb), idx, Dv,
                                         heads_block=16, block_k=32)
for t in range(Sq):
    sel = idx[t][idx[t] >= 0]
    s = q[t] @ kv[sel].T / np.sqrt(Dqk)
    m = s.max(1, keepdims=True)
    p = np.exp(s - m)
    rp = from_bf16_bits(to_bf16_bits(p.astype(np.float32))).astype(np.float64)
    assert_close(out[t], rp @ kv[sel, :Dv] / p.sum(1, keepdims=True), 2e-2, 1e-2)
print("ok")
"""

# fp8 operands, decoded to bf16 by the front end's bit operations: the last
# elementwise op's result is the dot's operand (it once reused an operand's
# plain rows: 8 wavefronts per matrix).
FP8 = KERNEL + """
rng = np.random.default_rng(SEED)
m, n, k = 70, 90, 128
vals = {f: np.array([fp8_value(c, f) for c in range(256)]) for f in ("e4m3", "e5m2")}
a = rng.integers(0, 256, (m, k)).astype(np.uint8)
b = rng.integers(0, 256, (k, n)).astype(np.uint8)
a[(a & 0x7F) == 0x7F] = 0x38          # no NaN codes
b[(b & 0x7C) == 0x7C] = 0x3C          # no e5m2 inf / NaN
c = np.full((m, n), np.nan, np.float32)
gemm[(kiln.cdiv(n, 64), kiln.cdiv(m, 64))](kiln.fp8(a, "e4m3"), kiln.fp8(b, "e5m2"), c,
                                          m, n, k, BM=64, BN=64, BK=64)
da, db = vals["e4m3"][a], vals["e5m2"][b]
assert_close(c, da @ db, 1e-6, 1e-6 * (np.abs(da) @ np.abs(db)).max())
print("ok")
"""

# Operands that other ops also read element by element (a key block appended
# to a cache; in a pipelined GEMM, B summed and multiplied again after an
# elementwise op, A stored), a transpose as A and one tile as both operands:
# they had plain rows, 8 wavefronts per matrix.
MIXED = """
import numpy as np
import kiln
from conftest import assert_close, from_bf16_bits, to_bf16_bits
from test_features import append_and_score, dot_transposed_a_and_square, gemm_with_side_reads

rng = np.random.default_rng(SEED)
def bf16(shape):
    bits = to_bf16_bits(rng.standard_normal(shape))
    return bits, from_bf16_bits(bits).astype(np.float64)
T, D = 100, 64
(qb, q), (kb, k) = bf16((16, D)), bf16((T, D))
cache = np.full((T, D), 0x7FC0, np.uint16)
s = np.full((16, T), np.nan, np.float32)
append_and_score[(2,)](kiln.bf16(qb), kiln.bf16(kb), kiln.bf16(cache), s, T, D=D, BT=64)
assert (cache == kb).all()
assert_close(s, q @ k.T, 1e-5, 1e-4)
M, N, K = 130, 100, 300
(ab, a), (bb, b) = bf16((M, K)), bf16((K, N))
c = np.full((M, N), np.nan, np.float32)
colsum = np.full((3, N), np.nan, np.float32)
acopy = np.full((M, K), 0x7FC0, np.uint16)
gemm_with_side_reads[(3, 2)](kiln.bf16(ab), kiln.bf16(bb), c, colsum, kiln.bf16(acopy),
                             M, N, K, BM=64, BN=64, BK=64)
assert_close(c, 3 * a @ b, 1e-5, 1e-4 * (np.abs(a) @ np.abs(b)).max())
assert_close(colsum, np.tile(b.sum(0), (3, 1)), 1e-6, 1e-4)
assert_close(from_bf16_bits(acopy), 2 * a, 0, 0)
# dot(trans(x), y) and dot(t, t): a transpose written for the dot, one tile
# as both operands (8 wavefronts each, before).
M, N, K = 100, 48, 64
(ab, a), (bb, b), (tb, t) = bf16((K, M)), bf16((K, N)), bf16((K, K))
c = np.full((M, N), np.nan, np.float32)
s = np.full((K, K), np.nan, np.float32)
dot_transposed_a_and_square[(2,)](kiln.bf16(ab), kiln.bf16(bb), kiln.bf16(tb), c, s, M, N,
                                  K=K, BM=64, BN=N)
assert_close(c, a.T @ b, 1e-5, 1e-4)
assert_close(s, t @ t, 1e-5, 1e-4)
print("ok")
"""


def run_case(tmp_path, code, swizzle, **subs):
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    for key, value in dict(SEED=seed, **subs).items():
        code = code.replace(key, str(value))
    script = tmp_path / "case.py"  # @kiln.jit reads its kernel's source file
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, KILN_TARGET="emu-sm_80", KILN_EMU_BANK_CONFLICTS="fail",
               KILN_SWIZZLE="1" if swizzle else "0")
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, str(script)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (
        f"exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")


@pytest.mark.parametrize("swizzle", [True, False])
def test_gemm_operands_read_without_conflicts(tmp_path, swizzle):
    run_case(tmp_path, GEMM, swizzle)


@pytest.mark.parametrize("swizzle", [True, False])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_attention_operands_read_without_conflicts(tmp_path, swizzle, head_dim):
    run_case(tmp_path, ATTENTION, swizzle, HEAD_DIM=head_dim)


@pytest.mark.parametrize("swizzle", [True, False])
def test_dsa_operands_read_without_conflicts(tmp_path, swizzle):
    run_case(tmp_path, DSA, swizzle)


@pytest.mark.parametrize("swizzle", [True, False])
def test_decoded_fp8_operands_read_without_conflicts(tmp_path, swizzle):
    run_case(tmp_path, FP8, swizzle)


@pytest.mark.parametrize("swizzle", [True, False])
def test_operands_other_ops_read_without_conflicts(tmp_path, swizzle):
    run_case(tmp_path, MIXED, swizzle)
