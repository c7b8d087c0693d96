import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The compiler CLI the tests run ($KILNC, else the build tree's).
KILNC = os.environ.get("KILNC", os.path.join(ROOT, "build", "bin", "kilnc"))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))


@pytest.fixture
def rng():
    seed = int(os.environ.get("KILN_TEST_SEED", np.random.SeedSequence().entropy % (1 << 32)))
    print(f"seed {seed}")
    return np.random.default_rng(seed)


def assert_close(got, ref, rtol, atol):
    """float64 reference; NaN (e.g. an unwritten, poisoned element) fails."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} NaN elements"
    finite = np.isfinite(ref)
    assert np.array_equal(got[~finite], ref[~finite])
    err = np.abs(got[finite] - ref[finite])
    tol = atol + rtol * np.abs(ref[finite])
    bad = err > tol
    assert not bad.any(), f"{bad.sum()} of {bad.size} off; worst {err.max()}"


def to_bf16_bits(x):
    """Round-to-nearest-even float32 -> bfloat16 bits (uint16)."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b):
    """bfloat16 bits (uint16) -> float32."""
    return (b.astype(np.uint32) << 16).view(np.float32)


def dense_reference(q, k, v, visible, scale, bias=None, modify=None):
    """Attention in float64: softmax(q kᵀ scale (+ bias(h, q_idx, kv_idx)),
    rewritten by modify(scores, b, h, q_idx, kv_idx) where given, masked
    where not `visible(b, h, q_idx, kv_idx)`) v and its log-sum-exp; rows
    that see no key get out = 0 and lse = -inf. GQA: query head h reads
    key/value head h / group."""
    B, Hq, S, D = q.shape
    g = Hq // k.shape[1]
    out = np.zeros(q.shape)
    lse = np.full((B, Hq, S), -np.inf)
    for b in range(B):
        for h in range(Hq):
            s = q[b, h].astype(np.float64) @ k[b, h // g].T.astype(np.float64) * scale
            qi, ki = np.arange(S)[:, None], np.arange(k.shape[2])[None, :]
            if bias is not None:
                s = s + bias(h, qi, ki)
            if modify is not None:
                s = np.broadcast_to(np.asarray(modify(s, b, h, qi, ki), np.float64), s.shape)
            vis = visible(b, h, qi, ki)
            s = np.where(vis, s, -np.inf)
            for i in range(S):
                if not np.isfinite(s[i]).any():
                    continue
                m = s[i].max()
                p = np.exp(s[i] - m)
                out[b, h, i] = p @ v[b, h // g] / p.sum()
                lse[b, h, i] = m + np.log(p.sum())
    return out, lse
