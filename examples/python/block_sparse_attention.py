"""Block-sparse attention forward (FlexAttention's BlockMask model).

Each (head, query block) visits only the key blocks listed for it; keys past
the sequence are masked; a row that sees no key gets 0 (and lse = -inf).
"""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def bsa_kernel(q, k, v, out, lse, kv_num, kv_idx, seq, nqb, maxb, scale,
               D: kl.constexpr, BLOCK: kl.constexpr):
    qb = kl.program_id(0)
    h = kl.program_id(1)
    heads = kl.num_programs(1)
    vq = kl.make_view(q, (heads, seq, D), (seq * D, D, 1))
    vk = kl.make_view(k, (heads, seq, D), (seq * D, D, 1))
    vv = kl.make_view(v, (heads, seq, D), (seq * D, D, 1))
    vo = kl.make_view(out, (heads, seq, D), (seq * D, D, 1))
    vl = kl.make_view(lse, (heads, seq), (seq, 1))
    qt = kl.reshape(kl.load(vq, offsets=(h, qb * BLOCK, 0), shape=(1, BLOCK, D)), (BLOCK, D)) * scale
    count = kl.load(kv_num + h * nqb + qb)
    m_i = kl.full((BLOCK,), float("-inf"), kl.float32)
    l_i = kl.zeros((BLOCK,), kl.float32)
    acc = kl.zeros((BLOCK, D), kl.float32)
    for j in range(0, count):
        kb = kl.load(kv_idx + (h * nqb + qb) * maxb + j)
        start = kb * BLOCK
        kt = kl.reshape(kl.load(vk, offsets=(h, start, 0), shape=(1, BLOCK, D)), (BLOCK, D))
        s = kl.dot(qt, kl.trans(kt))
        cols = start + kl.arange(0, BLOCK)
        s = kl.where(cols[None, :] < seq, s, float("-inf"))
        m_new = kl.maximum(m_i, kl.max(s, axis=1))
        m_safe = kl.where(m_new == float("-inf"), 0.0, m_new)
        p = kl.exp(s - m_safe[:, None])
        alpha = kl.exp(m_i - m_safe)
        l_i = l_i * alpha + kl.sum(p, axis=1)
        vt = kl.reshape(kl.load(vv, offsets=(h, start, 0), shape=(1, BLOCK, D)), (BLOCK, D))
        acc = kl.dot(p, vt, acc * alpha[:, None])
        m_i = m_new
    o = acc / kl.where(l_i == 0.0, 1.0, l_i)[:, None]
    kl.store(vo, kl.reshape(o, (1, BLOCK, D)), offsets=(h, qb * BLOCK, 0))
    kl.store(vl, (m_i + kl.log(l_i))[None, :], offsets=(h, qb * BLOCK))


def block_sparse_attention(q, k, v, kv_num, kv_idx, block=64):
    heads, seq, d = q.shape
    nqb = kiln.cdiv(seq, block)
    out = np.empty_like(q)
    lse = np.empty((heads, seq), np.float32)
    bsa_kernel[(nqb, heads)](q, k, v, out, lse, kv_num, kv_idx, seq, nqb, kv_idx.shape[-1],
                             1.0 / np.sqrt(d), D=d, BLOCK=block)
    return out, lse


def random_block_mask(heads, seq, block=64, density=0.5, seed=0):
    rng = np.random.default_rng(seed)
    nb = kiln.cdiv(seq, block)
    kv_num = np.zeros((heads, nb), np.int32)
    kv_idx = np.full((heads, nb, nb), -1, np.int32)
    for h in range(heads):
        for qb in range(nb):
            blocks = [kb for kb in range(nb) if rng.random() < density]
            kv_num[h, qb] = len(blocks)
            kv_idx[h, qb, :len(blocks)] = blocks
    return kv_num, kv_idx


def reference(q, k, v, kv_num, kv_idx, block=64):
    heads, seq, d = q.shape
    out = np.zeros((heads, seq, d))
    lse = np.full((heads, seq), -np.inf)
    for h in range(heads):
        for i in range(seq):
            qb = i // block
            keys = [kb * block + t for kb in kv_idx[h, qb, :kv_num[h, qb]]
                    for t in range(block) if kb * block + t < seq]
            if not keys:
                continue
            s = q[h, i].astype(np.float64) @ k[h, keys].T.astype(np.float64) / np.sqrt(d)
            mx = s.max()
            p = np.exp(s - mx)
            out[h, i] = p @ v[h, keys] / p.sum()
            lse[h, i] = mx + np.log(p.sum())
    return out, lse


def main():
    q, k, v = (np.random.randn(2, 200, 64).astype(np.float32) for _ in range(3))
    kv_num, kv_idx = random_block_mask(2, 200)
    out, lse = block_sparse_attention(q, k, v, kv_num, kv_idx)
    ro, rl = reference(q, k, v, kv_num, kv_idx)
    ok = np.allclose(out, ro, rtol=1e-4, atol=1e-4) and np.allclose(lse, rl, rtol=1e-5, atol=1e-5)
    print(f"block-sparse attention {q.shape}: {'matches numpy' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
