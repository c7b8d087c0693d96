"""Flash attention forward (causal optional): online softmax over key blocks."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def attention_kernel(q, k, v, out, seq, scale, CAUSAL: kl.constexpr,
                     D: kl.constexpr, BM: kl.constexpr, BN: kl.constexpr):
    qb = kl.program_id(0)
    h = kl.program_id(1)
    vq = kl.make_view(q, (kl.num_programs(1), seq, D), (seq * D, D, 1))
    vk = kl.make_view(k, (kl.num_programs(1), seq, D), (seq * D, D, 1))
    vv = kl.make_view(v, (kl.num_programs(1), seq, D), (seq * D, D, 1))
    vo = kl.make_view(out, (kl.num_programs(1), seq, D), (seq * D, D, 1))
    qt = kl.reshape(kl.load(vq, offsets=(h, qb * BM, 0), shape=(1, BM, D)), (BM, D)) * scale
    m_i = kl.full((BM,), float("-inf"), kl.float32)
    l_i = kl.zeros((BM,), kl.float32)
    acc = kl.zeros((BM, D), kl.float32)
    rows = qb * BM + kl.arange(0, BM)
    end = seq
    if CAUSAL:
        end = kl.minimum((qb + 1) * BM, seq)
    for start in range(0, end, BN):
        kt = kl.reshape(kl.load(vk, offsets=(h, start, 0), shape=(1, BN, D)), (BN, D))
        s = kl.dot(qt, kl.trans(kt))
        cols = start + kl.arange(0, BN)
        valid = cols[None, :] < seq
        if CAUSAL:
            valid = valid & (cols[None, :] <= rows[:, None])
        s = kl.where(valid, s, float("-inf"))
        m_new = kl.maximum(m_i, kl.max(s, axis=1))
        m_safe = kl.where(m_new == float("-inf"), 0.0, m_new)
        p = kl.exp(s - m_safe[:, None])
        alpha = kl.exp(m_i - m_safe)
        l_i = l_i * alpha + kl.sum(p, axis=1)
        vt = kl.reshape(kl.load(vv, offsets=(h, start, 0), shape=(1, BN, D)), (BN, D))
        acc = kl.dot(p, vt, acc * alpha[:, None])
        m_i = m_new
    o = acc / kl.where(l_i == 0.0, 1.0, l_i)[:, None]
    kl.store(vo, kl.reshape(o, (1, BM, D)), offsets=(h, qb * BM, 0))


def attention(q, k, v, causal=False, block=64):
    heads, seq, d = q.shape
    out = np.empty_like(q)
    attention_kernel[(kiln.cdiv(seq, block), heads)](
        q, k, v, out, seq, 1.0 / np.sqrt(d), CAUSAL=causal, D=d, BM=block, BN=block)
    return out


def reference(q, k, v, causal=False):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


def main():
    q, k, v = (np.random.randn(3, 300, 64).astype(np.float32) for _ in range(3))
    ok = all(np.allclose(attention(q, k, v, c), reference(q, k, v, c), rtol=1e-4, atol=1e-4)
             for c in (False, True))
    print(f"flash attention {q.shape}: {'matches numpy' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
