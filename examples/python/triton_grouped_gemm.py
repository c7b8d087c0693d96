"""Triton's grouped GEMM tutorial (08-grouped-gemm.py) with `kl` for `tl`:
one launch multiplies a group of matrices of different sizes (MoE experts'
GEMMs), each program walking the group's tiles with a stride of NUM_SM. The
matrices are found through tables of int64 addresses:
`kl.load(group_a_ptrs + g).to(kl.pointer_type(kl.float16))`.

One change from upstream: its loads and stores assume whole tiles ("assumes
full tile for now"); here they are masked, so groups of any size work.

The tables hold addresses where the kernel runs: `a.ctypes.data` of NumPy
arrays on the CPU, `t.data_ptr()` of CUDA tensors on a GPU (`pointer_table`
takes either)."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def grouped_matmul_kernel(
    # device tensor of matrices pointers
    group_a_ptrs,
    group_b_ptrs,
    group_c_ptrs,
    # device tensor of gemm sizes. its shape is [group_size, 3]
    # dim 0 is group_size, dim 1 is the values of <M, N, K> of each gemm
    group_gemm_sizes,
    # device tensor of leading dimension sizes. its shape is [group_size, 3]
    # dim 0 is group_size, dim 1 is the values of <lda, ldb, ldc> of each gemm
    g_lds,
    # number of gemms
    group_size,
    # number of virtual SM
    NUM_SM: kl.constexpr,
    # tile sizes
    BLOCK_SIZE_M: kl.constexpr,
    BLOCK_SIZE_N: kl.constexpr,
    BLOCK_SIZE_K: kl.constexpr,
):
    tile_idx = kl.program_id(0)
    last_problem_end = 0
    for g in range(group_size):
        # get the gemm size of the current problem
        gm = kl.load(group_gemm_sizes + g * 3)
        gn = kl.load(group_gemm_sizes + g * 3 + 1)
        gk = kl.load(group_gemm_sizes + g * 3 + 2)
        num_m_tiles = kl.cdiv(gm, BLOCK_SIZE_M)
        num_n_tiles = kl.cdiv(gn, BLOCK_SIZE_N)
        num_tiles = num_m_tiles * num_n_tiles
        # iterate through the tiles in the current gemm problem
        while (tile_idx >= last_problem_end and tile_idx < last_problem_end + num_tiles):
            # pick up a tile from the current gemm problem
            k = gk
            lda = kl.load(g_lds + g * 3)
            ldb = kl.load(g_lds + g * 3 + 1)
            ldc = kl.load(g_lds + g * 3 + 2)
            a_ptr = kl.load(group_a_ptrs + g).to(kl.pointer_type(kl.float16))
            b_ptr = kl.load(group_b_ptrs + g).to(kl.pointer_type(kl.float16))
            c_ptr = kl.load(group_c_ptrs + g).to(kl.pointer_type(kl.float16))
            # figure out tile coordinates
            tile_idx_in_gemm = tile_idx - last_problem_end
            tile_m_idx = tile_idx_in_gemm // num_n_tiles
            tile_n_idx = tile_idx_in_gemm % num_n_tiles

            # do regular gemm here
            offs_am = tile_m_idx * BLOCK_SIZE_M + kl.arange(0, BLOCK_SIZE_M)
            offs_bn = tile_n_idx * BLOCK_SIZE_N + kl.arange(0, BLOCK_SIZE_N)
            offs_k = kl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + offs_am[:, None] * lda + offs_k[None, :]
            b_ptrs = b_ptr + offs_k[:, None] * ldb + offs_bn[None, :]
            accumulator = kl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=kl.float32)
            for kk in range(0, kl.cdiv(k, BLOCK_SIZE_K)):
                # hint to Triton compiler to do proper loop pipelining
                kl.multiple_of(a_ptrs, [16, 16])
                kl.multiple_of(b_ptrs, [16, 16])
                # (masked here: upstream assumes full tiles)
                k_left = k - kk * BLOCK_SIZE_K
                a = kl.load(a_ptrs, mask=(offs_am[:, None] < gm) & (offs_k[None, :] < k_left),
                            other=0.0)
                b = kl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_bn[None, :] < gn),
                            other=0.0)
                accumulator += kl.dot(a, b)
                a_ptrs += BLOCK_SIZE_K
                b_ptrs += BLOCK_SIZE_K * ldb
            c = accumulator.to(kl.float16)

            offs_cm = tile_m_idx * BLOCK_SIZE_M + kl.arange(0, BLOCK_SIZE_M)
            offs_cn = tile_n_idx * BLOCK_SIZE_N + kl.arange(0, BLOCK_SIZE_N)
            c_ptrs = c_ptr + ldc * offs_cm[:, None] + offs_cn[None, :]

            # (masked here: upstream assumes full tiles)
            kl.store(c_ptrs, c, mask=(offs_cm[:, None] < gm) & (offs_cn[None, :] < gn))

            # go to the next tile by advancing NUM_SM
            tile_idx += NUM_SM

        # get ready to go to the next gemm problem
        last_problem_end = last_problem_end + num_tiles


def pointer_table(arrays):
    """int64 addresses of the arrays (NumPy: ctypes.data; CUDA tensors:
    data_ptr())."""
    return np.array([a.data_ptr() if hasattr(a, "data_ptr") else a.ctypes.data
                     for a in arrays], np.int64)


def launch_args(As, Bs, Cs, num_sm=4, block=(32, 32, 32)):
    """The kernel's arguments for row-major float16 A [m, k], B [k, n], C [m, n]
    per group (NumPy arrays or CUDA tensors; the caller keeps them alive)."""
    sizes, lds = [], []
    for a, b in zip(As, Bs):
        (m, k), n = a.shape, b.shape[1]
        sizes += [m, n, k]
        lds += [k, n, n]
    args = (pointer_table(As), pointer_table(Bs), pointer_table(Cs),
            np.array(sizes, np.int32), np.array(lds, np.int32), len(As))
    kw = dict(NUM_SM=num_sm, BLOCK_SIZE_M=block[0], BLOCK_SIZE_N=block[1],
              BLOCK_SIZE_K=block[2])
    return (num_sm,), args, kw


def group_gemm(As, Bs, num_sm=4, block=(32, 32, 32)):
    """float16 C = A @ B for each pair (NumPy float16 arrays)."""
    As = [np.ascontiguousarray(a, np.float16) for a in As]
    Bs = [np.ascontiguousarray(b, np.float16) for b in Bs]
    Cs = [np.empty((a.shape[0], b.shape[1]), np.float16) for a, b in zip(As, Bs)]
    grid, args, kw = launch_args(As, Bs, Cs, num_sm, block)
    grouped_matmul_kernel[grid](*args, **kw)
    return Cs


def main():
    rng = np.random.default_rng(0)
    shapes = [(64, 80, 48), (100, 33, 70), (17, 129, 64), (128, 128, 128)]
    As = [rng.standard_normal((m, k)).astype(np.float16) for m, n, k in shapes]
    Bs = [rng.standard_normal((k, n)).astype(np.float16) for m, n, k in shapes]
    Cs = group_gemm(As, Bs)
    ok = all(np.allclose(c.astype(np.float64), a.astype(np.float64) @ b, rtol=2e-3, atol=5e-2)
             for a, b, c in zip(As, Bs, Cs))
    print(f"Triton tutorial grouped GEMM ({len(shapes)} problems): "
          f"{'matches numpy' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
