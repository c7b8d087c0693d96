//===- GpuEmulatorTest.cpp - The SIMT emulator's semantics and checks ------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Hand-written "kernels" (C++ functions with the emulator's thread ABI) run
// on lib/Target/GPUEmu/kiln_gpu_emu.c directly. They pin down the semantics
// the emu-sm_XY target relies on (shuffles, mma.sync fragments, cp.async
// groups, TMA boxes, mbarrier phases) and show that each checker fires: a
// checker that cannot fail would make every emulated test vacuous. Failing
// checks abort, so those run in a forked child whose stderr is captured.
//
//===----------------------------------------------------------------------===//

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern "C" {
using ThreadFn = void (*)(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                          int32_t);
void kiln_emu_run_block(ThreadFn fn, void **argv, int32_t, int32_t, int32_t,
                        int32_t, int32_t, int32_t, int32_t numThreads,
                        int64_t sharedBytes, const char *name);
int32_t kiln_emu_thread_id(void);
int64_t kiln_emu_shared(void);
void kiln_emu_barrier(void);
void kiln_emu_named_barrier(int32_t id, int32_t count, int32_t wait);
int32_t kiln_emu_shfl_xor_b32(int32_t v, int32_t offset, int32_t width);
void kiln_emu_shared_access(int64_t addr, int32_t bytes, int32_t isWrite,
                            const char *site);
void kiln_emu_cp_async(int64_t dst, int64_t src, int64_t bytes,
                       int64_t srcBytes, const char *site);
void kiln_emu_cp_async_commit(void);
void kiln_emu_cp_async_wait(int32_t n);
void kiln_emu_ldmatrix(int64_t addr, int32_t n, int32_t trans, int64_t out,
                       const char *site);
void kiln_emu_fence_proxy_async(void);
void kiln_emu_wgmma_rs(int32_t a0, int32_t a1, int32_t a2, int32_t a3,
                       int64_t descB, int32_t n, int32_t isF16,
                       int32_t transB, int32_t scaleD, int64_t acc,
                       const char *site);
void kiln_emu_wgmma_fence(void);
void kiln_emu_wgmma_commit(void);
void kiln_emu_wgmma_wait(int32_t n);
void kiln_emu_wgmma(int64_t descA, int64_t descB, int32_t n, int32_t isF16,
                    int32_t transA, int32_t transB, int32_t scaleD,
                    int64_t acc, const char *site);
void kiln_emu_mma_m16n8k16(int32_t isF16, int32_t a0, int32_t a1, int32_t a2,
                           int32_t a3, int32_t b0, int32_t b1, float c0,
                           float c1, float c2, float c3, int64_t out);
void kiln_emu_tensormap_replace(int64_t map, int32_t field, int32_t ord,
                                int64_t value);
void kiln_emu_tensormap_release(void);
void kiln_emu_tensormap_acquire(int64_t map);
void kiln_emu_mbarrier_init(int64_t bar, int32_t count);
void kiln_emu_mbarrier_arrive_expect_tx(int64_t bar, int32_t bytes);
void kiln_emu_mbarrier_wait(int64_t bar, int32_t parity);
void kiln_emu_mbarrier_inval(int64_t bar);
void kiln_emu_tma_load(int64_t dst, int64_t map, int32_t rank, int32_t c0,
                       int32_t c1, int32_t c2, int32_t c3, int32_t c4,
                       int64_t bar, const char *site);
void kiln_emu_tma_store(int64_t src, int64_t map, int32_t rank, int32_t c0,
                        int32_t c1, int32_t c2, int32_t c3, int32_t c4,
                        const char *site);
void kiln_emu_bulk_commit(void);
void kiln_emu_bulk_wait(int32_t n);
}

namespace {

void run(ThreadFn fn, void **argv, int threads, int64_t shared) {
  kiln_emu_run_block(fn, argv, 0, 0, 0, 1, 1, 1, threads, shared, "test");
}

/// Runs `body` in a child process; returns (killed by SIGABRT, its stderr).
std::pair<bool, std::string> inChild(void (*body)()) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGABRT, SIG_DFL); // not Catch's handler: die of the abort
    dup2(fds[1], 2);
    close(fds[0]);
    body();
    _exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0)
    err.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, err};
}

int32_t *out32(void **argv) { return static_cast<int32_t *>(argv[0]); }

uint16_t toBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16); // exact for the small integers used below
}

void store(int64_t off, float v) {
  kiln_emu_shared_access(kiln_emu_shared() + off, 4, 1, "store");
  std::memcpy(reinterpret_cast<char *>(kiln_emu_shared() + off), &v, 4);
}

float load(int64_t off) {
  kiln_emu_shared_access(kiln_emu_shared() + off, 4, 0, "load");
  float v;
  std::memcpy(&v, reinterpret_cast<char *>(kiln_emu_shared() + off), 4);
  return v;
}

} // namespace

TEST_CASE("shuffles exchange within warps and width segments", "[emu]") {
  std::vector<int32_t> got(64 * 3, -1);
  void *argv[] = {got.data()};
  run(
      [](void **a, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
        int t = kiln_emu_thread_id();
        out32(a)[3 * t] = kiln_emu_shfl_xor_b32(100 + t, 16, 32);
        out32(a)[3 * t + 1] = kiln_emu_shfl_xor_b32(100 + t, 2, 8);
        out32(a)[3 * t + 2] = kiln_emu_shfl_xor_b32(100 + t, 8, 8);
      },
      argv, 64, 0);
  for (int t = 0; t < 64; ++t) {
    int lane = t % 32, base = t - lane;
    CHECK(got[3 * t] == 100 + base + (lane ^ 16));
    CHECK(got[3 * t + 1] == 100 + base + (lane ^ 2));
    CHECK(got[3 * t + 2] == 100 + t); // source outside the 8-lane segment
  }
}

namespace {
// One warp; A is 16x16 and B 16x8 of small integers (exact in bf16), C = 1.
float gA[16][16], gB[16][8], gD[32][4];

/// Fragments as the PTX ISA tables list them, element by element (a_i, b_i,
/// c_i), independent of the emulator's inverse mapping.
void mmaThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
               int32_t) {
  int lane = kiln_emu_thread_id(), g = lane / 4, t = lane % 4;
  uint16_t a[8], b[4];
  for (int i = 0; i < 8; ++i) {
    int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
    int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
    a[i] = toBF16(gA[row][col]);
  }
  for (int i = 0; i < 4; ++i)
    b[i] = toBF16(gB[t * 2 + (i & 1) + (i >= 2 ? 8 : 0)][g]);
  auto pack = [](uint16_t lo, uint16_t hi) {
    return int32_t(uint32_t(lo) | uint32_t(hi) << 16);
  };
  kiln_emu_mma_m16n8k16(0, pack(a[0], a[1]), pack(a[2], a[3]),
                        pack(a[4], a[5]), pack(a[6], a[7]), pack(b[0], b[1]),
                        pack(b[2], b[3]), 1, 1, 1, 1,
                        int64_t(reinterpret_cast<uintptr_t>(gD[lane])));
}
} // namespace

TEST_CASE("mma.sync m16n8k16 follows the PTX fragment layout", "[emu]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(-4, 4);
  for (auto &r : gA)
    for (float &x : r)
      x = float(d(rng));
  for (auto &r : gB)
    for (float &x : r)
      x = float(d(rng));
  run(mmaThread, nullptr, 32, 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      int row = lane / 4 + (i >= 2 ? 8 : 0), col = (lane % 4) * 2 + (i & 1);
      double ref = 1;
      for (int k = 0; k < 16; ++k)
        ref += double(gA[row][k]) * gB[k][col];
      CHECK(gD[lane][i] == ref);
    }
}

namespace {
// One warpgroup: D (64 x 24) = A (64 x 16) * B (16 x 24) + D, operands in
// shared memory in the no-swizzle canonical layouts of the PTX ISA, written
// here straight from its CuTe formulas (T = 8 16-bit elements):
//   K-major  ((8,m),(T,2k)):((1T,SBO),(1,LBO))
//   MN-major ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
// with strides unlike the compiler's (LBO and SBO both exercised).
constexpr int kWgN = 24;
float wA[64][16], wB[16][kWgN], wD[128][kWgN / 2];
int wTransA, wTransB, wScaleD, wSkipProxyFence;

/// Byte offset of element (mn, k) of an operand laid out with lbo/sbo.
int64_t canonical(int mn, int k, bool mnMajor, int64_t lbo, int64_t sbo) {
  if (mnMajor) // ((T,1,m),(8,k)): mn % 8 contiguous, k % 8 rows of 16 bytes
    return (mn % 8) * 2 + (mn / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo;
  return (mn % 8) * 16 + (mn / 8) * sbo + (k % 8) * 2 + (k / 8) * lbo;
}

int64_t descriptor(int64_t off, int64_t lbo, int64_t sbo) {
  int64_t addr = kiln_emu_shared() + off;
  return ((addr & 0x3FFFF) >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32;
}

/// Writes wA and wB into shared memory as bf16, element (m, k) of A at byte
/// aAt(m, k) and (n, k) of B at bAt(n, k) (generic stores: the emulator's
/// access checks apply).
void putWgmmaOperands(int64_t (*aAt)(int, int), int64_t (*bAt)(int, int)) {
  auto put = [](int64_t off, float v) {
    uint16_t h = toBF16(v);
    kiln_emu_shared_access(kiln_emu_shared() + off, 2, 1, "setup");
    std::memcpy(reinterpret_cast<char *>(kiln_emu_shared() + off), &h, 2);
  };
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 16; ++k)
      put(aAt(m, k), wA[m][k]);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < kWgN; ++n)
      put(bAt(n, k), wB[k][n]);
}

/// Runs `body` for the four transpose combinations of A and B (wTransA,
/// wTransB), naming the combination in failures.
template <typename Body> void forEachTranspose(Body body) {
  for (int variant = 0; variant < 4; ++variant) {
    wTransA = variant & 1;
    wTransB = variant >> 1 & 1;
    INFO("trans-a " << wTransA << ", trans-b " << wTransB);
    body();
  }
}

/// This thread's part of D = A * B (+ D, D starting at 1 with scale-d) into
/// wD, one committed group, waited for.
void issueWgmma(int64_t descA, int64_t descB, int scaleD, const char *site) {
  float *d = wD[kiln_emu_thread_id()];
  for (int i = 0; i < kWgN / 2; ++i)
    d[i] = 1;
  kiln_emu_wgmma_fence();
  kiln_emu_wgmma(descA, descB, kWgN, 0, wTransA, wTransB, scaleD,
                 int64_t(reinterpret_cast<uintptr_t>(d)), site);
  kiln_emu_wgmma_commit();
  kiln_emu_wgmma_wait(0);
}

// A at byte 0 (LBO 1024, SBO 128 K-major; LBO 128, SBO 256 M-major), B at
// byte 2048 (LBO 384, SBO 128 N-major; LBO 128, SBO 512 K-major).
constexpr int64_t kBOff = 2048;
int64_t aLbo() { return wTransA ? 128 : 1024; }
int64_t aSbo() { return wTransA ? 256 : 128; }
int64_t bLbo() { return wTransB ? 384 : 128; }
int64_t bSbo() { return wTransB ? 128 : 512; }

void wgmmaThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                 int32_t) {
  int t = kiln_emu_thread_id();
  if (t == 0) {
    putWgmmaOperands(
        [](int m, int k) { return canonical(m, k, wTransA, aLbo(), aSbo()); },
        [](int n, int k) {
          return kBOff + canonical(n, k, wTransB, bLbo(), bSbo());
        });
    if (!wSkipProxyFence)
      kiln_emu_fence_proxy_async(); // generic writes, async-proxy reads
  }
  kiln_emu_barrier();
  issueWgmma(descriptor(0, aLbo(), aSbo()), descriptor(kBOff, bLbo(), bSbo()),
             wScaleD, "wgmma");
}
} // namespace

namespace {
/// wA and wB: small integers (exact in bf16 and in f32 sums).
void randomWgmmaOperands(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  for (auto &r : wA)
    for (float &x : r)
      x = float(d(rng));
  for (auto &r : wB)
    for (float &x : r)
      x = float(d(rng));
}

/// wD against wA x wB (+ 1 with scale-d, every D starting at 1). The
/// accumulator D of m64nNk16 (PTX ISA figure): warp w holds rows
/// 16 w + lane / 4 (+ 8 for d[i], i % 4 >= 2), columns
/// 2 (lane % 4) + (i % 2) + 8 (i / 4).
void checkWgmmaAccumulators(int scaleD) {
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < kWgN / 2; ++i) {
      int w = t / 32, lane = t % 32;
      int row = 16 * w + lane / 4 + (i % 4 >= 2 ? 8 : 0);
      int col = 2 * (lane % 4) + (i % 2) + 8 * (i / 4);
      double ref = scaleD ? 1 : 0;
      for (int k = 0; k < 16; ++k)
        ref += double(wA[row][k]) * wB[k][col];
      CHECK(wD[t][i] == ref);
    }
}
} // namespace

TEST_CASE("wgmma m64nNk16 follows the PTX layouts and descriptors", "[emu]") {
  randomWgmmaOperands(11);
  for (int variant = 0; variant < 8; ++variant) {
    wTransA = variant & 1;
    wTransB = variant >> 1 & 1;
    wScaleD = variant >> 2 & 1;
    INFO("trans-a " << wTransA << ", trans-b " << wTransB << ", scale-d "
                    << wScaleD);
    run(wgmmaThread, nullptr, 128, 4096);
    checkWgmmaAccumulators(wScaleD);
  }
}

namespace {
// The same product with both operands in the 128B-swizzled canonical layouts
// (descriptor layout type 1), written from the ISA's CuTe formulas:
//   K-major  Swizzle<3,4,3> o ((8,m),(T,2k)):((8T,SBO),(1,T))
//   MN-major Swizzle<3,4,3> o ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))
// A K-major operand is k 16..31 of rows of 64 (the descriptor's start 32
// bytes into the line), as a wgmma's second k step within a 64-wide tile.
constexpr int64_t kSwB = 8192;

int64_t swizzled(int mn, int k, bool mnMajor, int64_t lbo) {
  int64_t lin = mnMajor ? (mn % 64) * 2 + (mn / 64) * lbo + (k % 8) * 128 +
                              (k / 8) * 1024
                        : (mn % 8) * 128 + (mn / 8) * 1024 + (16 + k) * 2;
  return lin ^ (((lin >> 7) & 7) << 4);
}

int64_t swizzledDescriptor(int64_t off, bool mnMajor, int64_t lbo) {
  return descriptor(off + (mnMajor ? 0 : 32), lbo, 1024) |
         int64_t(1) << 62;
}

void wgmmaSwizzledThread(void **, int32_t, int32_t, int32_t, int32_t,
                         int32_t, int32_t) {
  int t = kiln_emu_thread_id();
  if (t == 0) {
    putWgmmaOperands(
        [](int m, int k) { return swizzled(m, k, wTransA, 4096); },
        [](int n, int k) { return kSwB + swizzled(n, k, wTransB, 2048); });
    kiln_emu_fence_proxy_async();
  }
  kiln_emu_barrier();
  issueWgmma(swizzledDescriptor(0, wTransA, 4096),
             swizzledDescriptor(kSwB, wTransB, 2048), 1, "wgmma sw128");
}
} // namespace

TEST_CASE("wgmma reads the 128B-swizzled layouts", "[emu]") {
  randomWgmmaOperands(12);
  forEachTranspose([] {
    run(wgmmaSwizzledThread, nullptr, 128, 16384);
    checkWgmmaAccumulators(1);
  });
}

namespace {
// The same product with A in registers: each thread's four registers built
// from wA by the ISA's fragment table for wgmma .m64nNk16 A (as
// mma.m16n8k16's per warp: lane 4 g + q, register r holds row
// 16 warp + g + 8 (r % 2), k 2 q + 8 (r / 2) and the next k in the high
// half); B in shared memory as above.
void wgmmaRsThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                   int32_t) {
  int t = kiln_emu_thread_id();
  if (t == 0) {
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < kWgN; ++n) {
        int64_t off = kBOff + canonical(n, k, wTransB, bLbo(), bSbo());
        uint16_t h = toBF16(wB[k][n]);
        kiln_emu_shared_access(kiln_emu_shared() + off, 2, 1, "setup");
        std::memcpy(reinterpret_cast<char *>(kiln_emu_shared() + off), &h, 2);
      }
    kiln_emu_fence_proxy_async();
  }
  kiln_emu_barrier();
  int warp = t / 32, g = t % 32 / 4, q = t % 4;
  int32_t a[4];
  for (int r = 0; r < 4; ++r) {
    int row = 16 * warp + g + 8 * (r % 2), k = 2 * q + 8 * (r / 2);
    a[r] = int32_t(uint32_t(toBF16(wA[row][k])) |
                   uint32_t(toBF16(wA[row][k + 1])) << 16);
  }
  float *d = wD[t];
  for (int i = 0; i < kWgN / 2; ++i)
    d[i] = 1;
  kiln_emu_wgmma_fence();
  kiln_emu_wgmma_rs(a[0], a[1], a[2], a[3], descriptor(kBOff, bLbo(), bSbo()),
                    kWgN, 0, wTransB, wScaleD,
                    int64_t(reinterpret_cast<uintptr_t>(d)), "wgmma rs");
  kiln_emu_wgmma_commit();
  kiln_emu_wgmma_wait(0);
}
} // namespace

TEST_CASE("wgmma with A in registers follows the PTX fragment layout",
          "[emu]") {
  randomWgmmaOperands(12);
  for (int variant = 0; variant < 4; ++variant) {
    wTransB = variant & 1;
    wScaleD = variant >> 1 & 1;
    INFO("trans-b " << wTransB << ", scale-d " << wScaleD);
    run(wgmmaRsThread, nullptr, 128, 4096);
    checkWgmmaAccumulators(wScaleD);
  }
}

namespace {
// A 16x16 matrix of 16-bit values M[r][c] = 256 r + c in shared memory (row
// stride 32 bytes); each lane's ldmatrix registers after the load.
uint32_t gLdm[32][4], gLdmT[32][2];

void ldmatrixThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                    int32_t) {
  int lane = kiln_emu_thread_id();
  for (int i = lane; i < 256; i += 32) {
    uint16_t v = uint16_t(256 * (i / 16) + i % 16);
    kiln_emu_shared_access(kiln_emu_shared() + 2 * i, 2, 1, "fill");
    std::memcpy(reinterpret_cast<char *>(kiln_emu_shared() + 2 * i), &v, 2);
  }
  kiln_emu_barrier();
  // x4: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15), in that order.
  int m = lane / 8, row = lane % 8 + 8 * (m % 2), col = 8 * (m / 2);
  kiln_emu_ldmatrix(kiln_emu_shared() + 32 * row + 2 * col, 4, 0,
                    int64_t(reinterpret_cast<uintptr_t>(gLdm[lane])), "x4");
  // x2.trans: matrices rows 0-7 and rows 8-15 of columns 8-15.
  int trow = lane % 8 + 8 * ((lane / 8) % 2);
  kiln_emu_ldmatrix(kiln_emu_shared() + 32 * trow + 16, 2, 1,
                    int64_t(reinterpret_cast<uintptr_t>(gLdmT[lane])), "x2");
}
} // namespace

TEST_CASE("ldmatrix follows the PTX fragment layout", "[emu]") {
  run(ldmatrixThread, nullptr, 32, 512);
  auto word = [](int r0, int c0, int r1, int c1) {
    return uint32_t(256 * r0 + c0) | uint32_t(256 * r1 + c1) << 16;
  };
  for (int t = 0; t < 32; ++t) {
    int g = t / 4, q = t % 4;
    for (int i = 0; i < 4; ++i) {
      // Register i: matrix i, row g, columns 2q and 2q + 1.
      int r = g + 8 * (i % 2), c = 2 * q + 8 * (i / 2);
      CHECK(gLdm[t][i] == word(r, c, r, c + 1));
    }
    for (int i = 0; i < 2; ++i) {
      // .trans: rows 2q and 2q + 1 of column g of matrix i.
      int r = 2 * q + 8 * i, c = 8 + g;
      CHECK(gLdmT[t][i] == word(r, c, r + 1, c));
    }
  }
}

// ldmatrix.x1 of rows 0-7, column chunk 0, of a 16x64 bf16 tile (128-byte
// rows) laid out as gBankLayout says: 0 plain rows (all eight in banks 0-3),
// 1 rows padded by 16 bytes, 2 chunks XOR-swizzled by the row.
int gBankLayout;
void bankThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                int32_t) {
  int lane = kiln_emu_thread_id(), r = lane % 8;
  int64_t off = gBankLayout == 1 ? 144 * r
                : gBankLayout == 2 ? 128 * r + 16 * (0 ^ r)
                                   : 128 * r;
  static uint32_t out[32];
  kiln_emu_ldmatrix(kiln_emu_shared() + off, 1, 0,
                    int64_t(reinterpret_cast<uintptr_t>(&out[lane])), "bank");
}

TEST_CASE("the ldmatrix bank checker counts wavefronts", "[emu]") {
  auto runIn = [](int layout, bool check) {
    gBankLayout = layout;
    static bool sCheck;
    sCheck = check;
    return inChild([] {
      if (sCheck)
        setenv("KILN_EMU_BANK_CONFLICTS", "fail", 1);
      else
        unsetenv("KILN_EMU_BANK_CONFLICTS");
      run(bankThread, nullptr, 32, 4096);
    });
  };
  {
    auto [aborted, err] = runIn(0, true);
    CHECK(aborted);
    CHECK(err.find("ldmatrix bank conflict: matrix 0 of warp 0 takes 8 "
                   "wavefronts") != std::string::npos);
  }
  for (int layout : {1, 2}) {
    auto [aborted, err] = runIn(layout, true);
    CHECK_FALSE(aborted);
    CHECK(err.empty());
  }
  // Off unless asked for: the conflict is only a cost.
  auto [aborted, err] = runIn(0, false);
  CHECK_FALSE(aborted);
  CHECK(err.empty());
}

TEST_CASE("cp.async lands at wait_group, zero-fills, in flight until then",
          "[emu]") {
  static float src[64];
  for (int i = 0; i < 64; ++i)
    src[i] = float(i) + 0.5f;
  std::vector<float> got(2 * 64, 0);
  void *argv[] = {got.data()};
  run(
      [](void **a, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
        int t = kiln_emu_thread_id();
        auto *o = static_cast<float *>(a[0]);
        int64_t dst = kiln_emu_shared() + 4 * t;
        // Thread 63's copy reads no bytes: zero-filled.
        kiln_emu_cp_async(dst, int64_t(reinterpret_cast<uintptr_t>(&src[t])),
                          4, t == 63 ? 0 : 4, "copy");
        kiln_emu_cp_async_commit();
        // Other bytes stay free while the copies fly.
        store(256 + 4 * t, float(t));
        o[t] = load(256 + 4 * t);
        kiln_emu_cp_async_wait(0);
        kiln_emu_barrier();
        o[64 + t] = load(4 * ((t + 1) % 64));
      },
      argv, 64, 512);
  for (int t = 0; t < 64; ++t) {
    CHECK(got[t] == float(t));
    int s = (t + 1) % 64;
    CHECK(got[64 + t] == (s == 63 ? 0.0f : src[s]));
  }
  // Reading a copy's bytes before its thread's wait_group retired it: by
  // that thread, or by another one after a barrier (the copy may still
  // land any time), is refused.
  static bool readOther;
  for (bool other : {false, true}) {
    readOther = other;
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            int t = kiln_emu_thread_id();
            kiln_emu_cp_async(kiln_emu_shared() + 4 * t,
                              int64_t(reinterpret_cast<uintptr_t>(&src[t])), 4,
                              4, "copy");
            kiln_emu_cp_async_commit();
            if (readOther) {
              kiln_emu_barrier();
              (void)load(4 * ((t + 1) % 32));
            } else {
              (void)load(4 * t);
            }
            kiln_emu_cp_async_wait(0);
          },
          nullptr, 32, 256);
    });
    CHECK(aborted);
    CHECK(err.find("while a cp.async to it (copy) is in flight") !=
          std::string::npos);
  }
}

TEST_CASE("named barriers order warpgroups in turns", "[emu]") {
  // GPUPingpong.cpp's schedule: warpgroup w waits at barrier 1 + w before a
  // turn and arrives at the next one's after it; warpgroup 1 arrives at
  // barrier 1 first, warpgroup 0 takes the last arrive after the turns.
  static int order[8];
  static int turns;
  turns = 0;
  run(
      [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
        int t = kiln_emu_thread_id(), wg = t / 128;
        if (wg == 1)
          kiln_emu_named_barrier(1, 256, 0);
        for (int i = 0; i < 4; ++i) {
          kiln_emu_named_barrier(1 + wg, 256, 1);
          if (t % 128 == 0)
            order[turns++] = wg;
          kiln_emu_named_barrier(1 + (wg + 1) % 2, 256, 0);
        }
        if (wg == 0)
          kiln_emu_named_barrier(1, 256, 1);
      },
      nullptr, 256, 0);
  REQUIRE(turns == 8);
  for (int i = 0; i < 8; ++i)
    CHECK(order[i] == i % 2);
}

TEST_CASE("the named barrier checkers fire", "[emu]") {
  SECTION("a wait nobody arrives for") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            if (kiln_emu_thread_id() < 128)
              kiln_emu_named_barrier(1, 256, 1);
          },
          nullptr, 256, 0);
    });
    CHECK(aborted);
    CHECK(err.find("deadlocks: 0 threads wait at a barrier, 0 at a warp "
                   "collective, 0 on an mbarrier, 128 at a named barrier, "
                   "128 have exited; named barrier 1 (128 waiting): 128 of "
                   "256 threads arrived") != std::string::npos);
  }
  SECTION("an arrive nobody waits for") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            if (kiln_emu_thread_id() >= 128)
              kiln_emu_named_barrier(2, 256, 0);
          },
          nullptr, 256, 0);
    });
    CHECK(aborted);
    CHECK(err.find("ends with 128 of 256 threads arrived at named barrier 2") !=
          std::string::npos);
  }
  SECTION("thread counts that disagree") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            kiln_emu_named_barrier(1, kiln_emu_thread_id() < 32 ? 64 : 96,
                                   0);
          },
          nullptr, 128, 0);
    });
    CHECK(aborted);
    CHECK(err.find("named barrier 1: a count of 96 threads in a phase that "
                   "expects 64") != std::string::npos);
  }
  SECTION("barrier 0 and counts that are not whole warps") {
    for (auto body : {+[](void **, int32_t, int32_t, int32_t, int32_t,
                          int32_t, int32_t) {
                        kiln_emu_named_barrier(0, 32, 0);
                      },
                      +[](void **, int32_t, int32_t, int32_t, int32_t,
                          int32_t, int32_t) {
                        kiln_emu_named_barrier(3, 48, 0);
                      }}) {
      static ThreadFn fn;
      fn = body;
      auto [aborted, err] = inChild([] { run(fn, nullptr, 64, 0); });
      CHECK(aborted);
      CHECK(err.find("named barrier") != std::string::npos);
    }
  }
}

TEST_CASE("the checkers fire", "[emu]") {
  SECTION("a write-read race between barriers") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            if (kiln_emu_thread_id() == 0)
              store(0, 1);
            (void)load(0); // no barrier in between
          },
          nullptr, 32, 64);
    });
    CHECK(aborted);
    CHECK(err.find("data race on shared byte 0") != std::string::npos);
  }
  SECTION("the same accesses with a barrier are fine") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            if (kiln_emu_thread_id() == 0)
              store(0, 1);
            kiln_emu_barrier();
            (void)load(0);
          },
          nullptr, 32, 64);
    });
    CHECK_FALSE(aborted);
    CHECK(err.empty());
  }
  SECTION("a read then a write by another thread") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            if (kiln_emu_thread_id() == 1)
              (void)load(8);
            if (kiln_emu_thread_id() == 2)
              store(8, 3);
          },
          nullptr, 32, 64);
    });
    CHECK(aborted);
    CHECK(err.find("data race") != std::string::npos);
  }
  SECTION("an access outside the kernel's shared bytes") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            (void)load(64);
          },
          nullptr, 32, 64);
    });
    CHECK(aborted);
    CHECK(err.find("outside the kernel's 64 bytes") != std::string::npos);
  }
  SECTION("a thread that skips a barrier") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            if (kiln_emu_thread_id() != 5)
              kiln_emu_barrier();
          },
          nullptr, 64, 0);
    });
    CHECK(aborted);
    CHECK(err.find("deadlocks: 63 threads wait at a barrier") !=
          std::string::npos);
  }
  SECTION("wgmma without a fence") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            float d[4] = {};
            kiln_emu_wgmma(descriptor(0, 128, 256), descriptor(0, 128, 256),
                           8, 0, 0, 0, 1,
                           int64_t(reinterpret_cast<uintptr_t>(d)), "the mma");
          },
          nullptr, 128, 4096);
    });
    CHECK(aborted);
    CHECK(err.find("the mma: wgmma.mma_async without a wgmma.fence") !=
          std::string::npos);
  }
  SECTION("wgmma reading writes not fenced for the async proxy") {
    auto [aborted, err] = inChild([] {
      wSkipProxyFence = 1;
      run(wgmmaThread, nullptr, 128, 4096);
    });
    CHECK(aborted);
    CHECK(err.find("without a fence.proxy.async after it") !=
          std::string::npos);
  }
  SECTION("wgmma descriptors that differ across the warpgroup") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            float d[4] = {};
            int64_t a = kiln_emu_thread_id() == 77 ? 16 : 0;
            kiln_emu_wgmma_fence();
            kiln_emu_wgmma(descriptor(a, 128, 256), descriptor(0, 128, 256),
                           8, 0, 0, 0, 1,
                           int64_t(reinterpret_cast<uintptr_t>(d)), "the mma");
            kiln_emu_wgmma_commit();
            kiln_emu_wgmma_wait(0);
          },
          nullptr, 128, 4096);
    });
    CHECK(aborted);
    CHECK(err.find("differ across the warpgroup") != std::string::npos);
  }
  SECTION("a write of bytes an in-flight wgmma reads") {
    // Warpgroup 0 issues two groups, reading bytes from 0 and from 4096,
    // and retires only the first before the barrier: past it, warpgroup 1
    // may overwrite the first group's operands, not the second's.
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            int t = kiln_emu_thread_id();
            float d[4] = {};
            if (t < 128) {
              for (int64_t at : {int64_t(0), int64_t(4096)}) {
                kiln_emu_wgmma_fence();
                kiln_emu_wgmma(descriptor(at, 128, 256),
                               descriptor(at, 128, 256), 8, 0, 0, 0, 1,
                               int64_t(reinterpret_cast<uintptr_t>(d)),
                               "the mma");
                kiln_emu_wgmma_commit();
              }
              kiln_emu_wgmma_wait(1);
            }
            kiln_emu_barrier(); // the second group is still in flight
            if (t == 200) {
              kiln_emu_shared_access(kiln_emu_shared() + 2, 2, 1, "retired");
              kiln_emu_shared_access(kiln_emu_shared() + 4098, 2, 1,
                                     "in flight");
            }
            if (t < 128)
              kiln_emu_wgmma_wait(0);
          },
          nullptr, 256, 8192);
    });
    CHECK(aborted);
    CHECK(err.find("in flight: writes shared byte 4098, which a "
                   "wgmma.mma_async of warpgroup 0 (its group 2) may still "
                   "read") != std::string::npos);
    CHECK(err.find("retired:") == std::string::npos);
  }
  SECTION("a thread that exits with copies in flight") {
    auto [aborted, err] = inChild([] {
      static float src[1] = {1};
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            if (kiln_emu_thread_id() == 0) {
              kiln_emu_cp_async(kiln_emu_shared(),
                                int64_t(reinterpret_cast<uintptr_t>(src)), 4,
                                4, "the copy");
              kiln_emu_cp_async_commit();
            }
          },
          nullptr, 32, 64);
    });
    CHECK(aborted);
    CHECK(err.find("copies in flight") != std::string::npos);
  }
}

namespace {
// tensormap.replace's fields, and the element types used here, in the PTX
// encoding.
enum : int32_t {
  kFieldAddress,
  kFieldRank,
  kFieldBoxDim,
  kFieldGlobalDim,
  kFieldGlobalStride,
  kFieldElementStride,
  kFieldElemType,
  kFieldInterleave,
  kFieldSwizzle,
  kFieldFill
};
enum : int64_t { kTypeU64 = 4, kTypeF32 = 7, kTypeBF16 = 10 };

int64_t address(const void *p) {
  return int64_t(reinterpret_cast<uintptr_t>(p));
}
int64_t smem(int64_t off) { return kiln_emu_shared() + off; }

uint16_t load16(int64_t off) {
  kiln_emu_shared_access(smem(off), 2, 0, "load16");
  uint16_t v;
  std::memcpy(&v, reinterpret_cast<char *>(smem(off)), 2);
  return v;
}

/// A tiled tensor map: dimension 0 is the contiguous one; strides[i] (bytes)
/// is dimension i + 1's.
struct TensorDesc {
  const void *base;
  int rank;
  int64_t type;
  int64_t dims[5];
  int64_t strides[4];
  int64_t box[5];
};

/// What one thread of a TMA kernel does first, as the compiler emits it:
/// zero-fill the map's 128 bytes with ordinary stores, one tensormap.replace
/// per field, then the release and acquire fences.
void buildMap(void *slot, const TensorDesc &d, bool release = true,
              bool acquire = true, int64_t swizzle = 0) {
  std::memset(slot, 0, 128);
  int64_t map = address(slot);
  kiln_emu_tensormap_replace(map, kFieldAddress, 0, address(d.base));
  kiln_emu_tensormap_replace(map, kFieldRank, 0, d.rank - 1);
  kiln_emu_tensormap_replace(map, kFieldElemType, 0, d.type);
  for (int i = 0; i < d.rank; ++i) {
    kiln_emu_tensormap_replace(map, kFieldGlobalDim, i, d.dims[i]);
    kiln_emu_tensormap_replace(map, kFieldBoxDim, i, d.box[i]);
    kiln_emu_tensormap_replace(map, kFieldElementStride, i, 1);
    if (i + 1 < d.rank)
      kiln_emu_tensormap_replace(map, kFieldGlobalStride, i, d.strides[i]);
  }
  kiln_emu_tensormap_replace(map, kFieldInterleave, 0, 0);
  kiln_emu_tensormap_replace(map, kFieldSwizzle, 0, swizzle);
  kiln_emu_tensormap_replace(map, kFieldFill, 0, 0);
  if (release)
    kiln_emu_tensormap_release();
  if (acquire)
    kiln_emu_tensormap_acquire(map);
}

alignas(64) unsigned char gMapSlot[4][128]; // "global memory" scratch slots

// 2D: a ragged 37 x 45 f32 tensor with rows padded to 192 bytes, read in
// 16 x 8 boxes (512 bytes) at corners inside, across and past its edges.
constexpr int kRows = 37, kCols = 45, kPitch = 48;
constexpr int kBoxW = 16, kBoxH = 8, kBoxes = 5;
constexpr int64_t kBoxBytes = kBoxW * kBoxH * 4, kBar2d = kBoxes * kBoxBytes;
alignas(16) float gGrid[kRows][kPitch];
const int kCorner2d[kBoxes][2] = {
    {-5, -3}, {37, 34}, {16, 8}, {40, -7}, {-20, 30}};
float gGot2d[kBoxes * kBoxW * kBoxH];

void tma2dThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                 int32_t) {
  int t = kiln_emu_thread_id();
  int64_t bar = smem(kBar2d), map = address(gMapSlot[0]);
  if (t == 0) {
    buildMap(gMapSlot[0], {gGrid, 2, kTypeF32, {kCols, kRows}, {kPitch * 4},
                           {kBoxW, kBoxH}});
    kiln_emu_mbarrier_init(bar, 1);
  }
  kiln_emu_fence_proxy_async();
  kiln_emu_barrier();
  if (t == 0) {
    kiln_emu_mbarrier_arrive_expect_tx(bar, int32_t(kBoxes * kBoxBytes));
    for (int b = 0; b < kBoxes; ++b)
      kiln_emu_tma_load(smem(b * kBoxBytes), map, 2, kCorner2d[b][0],
                        kCorner2d[b][1], 0, 0, 0, bar, "tma 2d");
  }
  kiln_emu_mbarrier_wait(bar, 0);
  kiln_emu_barrier();
  for (int e = t; e < kBoxes * kBoxW * kBoxH; e += 128)
    gGot2d[e] = load(4 * e);
}

// 3D: a 24 x 5 x 7 bf16-typed tensor (bits compared, values 16-bit ints),
// rows padded to 64 bytes, planes to 336; boxes of 16 x 1 x 4 (128 bytes)
// into two stages, refilled in a second phase of the same mbarrier. A
// thread in the middle of the block produces, so that the others wait.
constexpr int kD0 = 24, kD1 = 5, kD2 = 7, kRowPitch = 32, kPlanePitch = 168;
constexpr int kProducer = 100;
alignas(16) uint16_t gVol[kD2][kPlanePitch];
const int kCorner3d[2][2][3] = {{{20, 4, -2}, {0, 5, 3}},
                                {{-8, 2, 3}, {4, 0, 5}}};
uint16_t gGot3d[2][128];

void tma3dThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                 int32_t) {
  int t = kiln_emu_thread_id();
  int64_t bar = smem(256), map = address(gMapSlot[1]);
  if (t == kProducer) {
    buildMap(gMapSlot[1],
             {gVol, 3, kTypeBF16, {kD0, kD1, kD2},
              {2 * kRowPitch, 2 * kPlanePitch}, {16, 1, 4}});
    kiln_emu_mbarrier_init(bar, 1);
    kiln_emu_fence_proxy_async();
  }
  kiln_emu_barrier();
  for (int phase = 0; phase < 2; ++phase) {
    if (phase == 1) {
      // Parity semantics: phase 0 (parity 0) has completed and phase 1 is
      // current, so this returns at once (it would block once phase 2 is).
      kiln_emu_mbarrier_wait(bar, 0);
      kiln_emu_barrier();
    }
    if (t == kProducer) {
      kiln_emu_mbarrier_arrive_expect_tx(bar, 256);
      for (int b = 0; b < 2; ++b) {
        const int *c = kCorner3d[phase][b];
        kiln_emu_tma_load(smem(128 * b), map, 3, c[0], c[1], c[2], 0, 0, bar,
                          "tma 3d");
      }
    }
    kiln_emu_mbarrier_wait(bar, phase); // threads before the producer block
    // No barrier: observing the phase orders the copy before these reads.
    gGot3d[phase][t] = load16(2 * t);
    kiln_emu_barrier(); // everyone has read the stages before the refill
  }
}
} // namespace

// The compiler builds a map in shared memory and copies it to its global
// slot with plain stores before the release (GPUPipelining.cpp): the slot
// takes the state of the released map with its bytes, also when it is
// rebuilt with other bytes (a loop's maps inside an outer loop).
alignas(64) unsigned char gStaging[128];
float gGotCopied[2];

void copiedMapThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                     int32_t) {
  int t = kiln_emu_thread_id();
  int64_t bar = smem(512), map = address(gMapSlot[3]);
  for (int round = 0; round < 2; ++round) {
    if (t == 0) {
      // Round 1 views the grid from row 8: another base address.
      buildMap(gStaging, {&gGrid[8 * round][0], 2, kTypeF32,
                          {kCols, kRows - 8 * round}, {kPitch * 4}, {kBoxW, kBoxH}},
               /*release=*/false, /*acquire=*/false);
      std::memcpy(gMapSlot[3], gStaging, 128);
      kiln_emu_tensormap_release();
      kiln_emu_tensormap_acquire(map);
      kiln_emu_mbarrier_init(bar, 1);
    }
    kiln_emu_fence_proxy_async();
    kiln_emu_barrier();
    if (t == 0) {
      kiln_emu_mbarrier_arrive_expect_tx(bar, int32_t(kBoxBytes));
      kiln_emu_tma_load(smem(0), map, 2, 0, 0, 0, 0, 0, bar, "copied map");
    }
    kiln_emu_mbarrier_wait(bar, 0);
    kiln_emu_barrier();
    if (t == 0) {
      gGotCopied[round] = load(0);
      kiln_emu_mbarrier_inval(bar);
    }
    kiln_emu_barrier();
  }
}

TEST_CASE("a map copied to its slot after being built elsewhere", "[emu]") {
  for (int y = 0; y < kRows; ++y)
    for (int x = 0; x < kPitch; ++x)
      gGrid[y][x] = x < kCols ? float(1 + x + 100 * y) : -1.0f;
  run(copiedMapThread, nullptr, 32, 1024);
  CHECK(gGotCopied[0] == gGrid[0][0]);
  CHECK(gGotCopied[1] == gGrid[8][0]);
}

TEST_CASE("TMA copies boxes with zero fill, mbarrier phases", "[emu]") {
  for (int y = 0; y < kRows; ++y)
    for (int x = 0; x < kPitch; ++x)
      gGrid[y][x] = x < kCols ? float(1 + x + 100 * y) : -1.0f;
  std::fill(std::begin(gGot2d), std::end(gGot2d), -2.0f);
  run(tma2dThread, nullptr, 128, kBar2d + 128);
  for (int b = 0; b < kBoxes; ++b)
    for (int j1 = 0; j1 < kBoxH; ++j1)
      for (int j0 = 0; j0 < kBoxW; ++j0) {
        int x = kCorner2d[b][0] + j0, y = kCorner2d[b][1] + j1;
        bool inside = x >= 0 && x < kCols && y >= 0 && y < kRows;
        INFO("box " << b << ", element (" << j0 << ", " << j1 << ")");
        CHECK(gGot2d[b * kBoxW * kBoxH + j1 * kBoxW + j0] ==
              (inside ? gGrid[y][x] : 0.0f));
      }

  for (int z = 0; z < kD2; ++z)
    for (int i = 0; i < kPlanePitch; ++i) {
      int y = i / kRowPitch, x = i % kRowPitch;
      gVol[z][i] = y < kD1 && x < kD0 ? uint16_t(1 + x + 30 * y + 200 * z)
                                      : uint16_t(0xDEAD);
    }
  std::memset(gGot3d, 0xEE, sizeof gGot3d);
  run(tma3dThread, nullptr, 128, 512);
  for (int phase = 0; phase < 2; ++phase)
    for (int t = 0; t < 128; ++t) {
      // Box element (j0, 0, j2) of box t / 64 is element t % 64 (j0 fastest).
      const int *c = kCorner3d[phase][t / 64];
      int x = c[0] + t % 16, y = c[1], z = c[2] + t % 64 / 16;
      bool inside = x >= 0 && x < kD0 && y >= 0 && y < kD1 && z >= 0 && z < kD2;
      INFO("phase " << phase << ", thread " << t);
      CHECK(gGot3d[phase][t] ==
            (inside ? gVol[z][y * kRowPitch + x] : uint16_t(0)));
    }
}

namespace {
// The 128B swizzle: a ragged 20 x 70 bf16-typed tensor (rows padded to 80
// elements) read in 64 x 16 boxes (rows of 128 bytes, 2 KiB) at corners
// inside and across its edges, to 1024-byte aligned stages. Element
// (j0, j1) of a box lands at byte j1 * 128 + j0 * 2 with its 16-byte chunk
// (bits 4-6) XOR the line (bits 7-9).
constexpr int kSwRows = 20, kSwCols = 70, kSwPitch = 80;
alignas(16) uint16_t gSwGrid[kSwRows][kSwPitch];
const int kSwCorner[2][2] = {{0, 0}, {30, 12}};
uint16_t gSwGot[2][64 * 16];

void tmaSwizzleThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                      int32_t) {
  int t = kiln_emu_thread_id();
  int64_t bar = smem(4096), map = address(gMapSlot[0]);
  if (t == 0) {
    buildMap(gMapSlot[0],
             {gSwGrid, 2, kTypeBF16, {kSwCols, kSwRows}, {2 * kSwPitch},
              {64, 16}},
             true, true, /*swizzle=*/3);
    kiln_emu_mbarrier_init(bar, 1);
    kiln_emu_fence_proxy_async();
  }
  kiln_emu_barrier();
  if (t == 0) {
    kiln_emu_mbarrier_arrive_expect_tx(bar, 4096);
    for (int b = 0; b < 2; ++b)
      kiln_emu_tma_load(smem(2048 * b), map, 2, kSwCorner[b][0],
                        kSwCorner[b][1], 0, 0, 0, bar, "tma sw128");
  }
  kiln_emu_mbarrier_wait(bar, 0);
  for (int e = t; e < 2 * 64 * 16; e += 128) {
    int b = e / 1024, j = e % 1024;
    int64_t lin = (j / 64) * 128 + (j % 64) * 2;
    gSwGot[b][j] = load16(2048 * b + (lin ^ (((lin >> 7) & 7) << 4)));
  }
}
} // namespace

TEST_CASE("TMA lays boxes out in the 128B swizzle", "[emu]") {
  for (int y = 0; y < kSwRows; ++y)
    for (int x = 0; x < kSwPitch; ++x)
      gSwGrid[y][x] = x < kSwCols ? uint16_t(1 + x + 100 * y) : uint16_t(0xDEAD);
  std::memset(gSwGot, 0xEE, sizeof gSwGot);
  run(tmaSwizzleThread, nullptr, 128, 4096 + 128);
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 64 * 16; ++j) {
      int x = kSwCorner[b][0] + j % 64, y = kSwCorner[b][1] + j / 64;
      bool inside = x < kSwCols && y < kSwRows;
      INFO("box " << b << ", element (" << j % 64 << ", " << j / 64 << ")");
      CHECK(gSwGot[b][j] == (inside ? gSwGrid[y][x] : uint16_t(0)));
    }
}

namespace {
// TMA stores: a 16 x 8 f32 box (rows of 64 bytes) written by all threads,
// fenced, then stored by thread 0 at corners inside and across the edges of
// a ragged 20 x 13 tensor (rows padded to 24): elements outside it are not
// written. gStoreSkip: 1 leaves out the writers' fence, 2 the wait.
constexpr int kStRows = 13, kStCols = 20, kStPitch = 24;
alignas(16) float gStGrid[kStRows][kStPitch];
int gStoreSkip, gStoreCorner[2];
float gStBeforeWait; // a stored element, read between the issue and the wait

void tmaStoreThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                    int32_t) {
  int t = kiln_emu_thread_id();
  float v = float(1000 + t);
  kiln_emu_shared_access(smem(4 * t), 4, 1, "fill");
  std::memcpy(reinterpret_cast<char *>(smem(4 * t)), &v, 4);
  if (gStoreSkip != 1)
    kiln_emu_fence_proxy_async();
  kiln_emu_barrier();
  if (t == 0) {
    buildMap(gMapSlot[0], {gStGrid, 2, kTypeF32, {kStCols, kStRows},
                           {kStPitch * 4}, {16, 8}});
    kiln_emu_tma_store(smem(0), address(gMapSlot[0]), 2, gStoreCorner[0],
                       gStoreCorner[1], 0, 0, 0, "the store");
    kiln_emu_bulk_commit();
    gStBeforeWait = gStGrid[std::max(0, gStoreCorner[1])]
                           [std::max(0, gStoreCorner[0])];
    if (gStoreSkip != 2)
      kiln_emu_bulk_wait(0);
  }
  kiln_emu_barrier();
}
} // namespace

TEST_CASE("TMA stores write the box's elements inside the tensor", "[emu]") {
  for (auto corner : {std::pair<int, int>{2, 3}, {10, 9}, {-4, -2}}) {
    gStoreCorner[0] = corner.first;
    gStoreCorner[1] = corner.second;
    for (auto &row : gStGrid)
      for (float &x : row)
        x = -1;
    run(tmaStoreThread, nullptr, 128, 512);
    // The global writes land at the wait, not at the issue.
    CHECK(gStBeforeWait == -1.0f);
    for (int y = 0; y < kStRows; ++y)
      for (int x = 0; x < kStPitch; ++x) {
        int j0 = x - corner.first, j1 = y - corner.second;
        bool stored = x < kStCols && j0 >= 0 && j0 < 16 && j1 >= 0 && j1 < 8;
        INFO("corner (" << corner.first << ", " << corner.second
                        << "), element (" << x << ", " << y << ")");
        CHECK(gStGrid[y][x] == (stored ? float(1000 + j1 * 16 + j0) : -1.0f));
      }
  }
  SECTION("the checkers fire") {
    gStoreCorner[0] = gStoreCorner[1] = 0;
    for (auto [skip, expected] :
         {std::pair<int, const char *>{1, "the store: a TMA store reads shared "
                                          "byte 0, which thread 0 wrote "
                                          "(fill) without a fence.proxy.async"},
          {2, "reaches a barrier with TMA stores in flight"}}) {
      gStoreSkip = skip;
      auto [aborted, err] =
          inChild([] { run(tmaStoreThread, nullptr, 128, 512); });
      INFO(err);
      CHECK(aborted);
      CHECK(err.find(expected) != std::string::npos);
    }
    gStoreSkip = 0;
  }
}

namespace {
// wgmma straight from TMA-written operands: the same A and B images as the
// wgmma test's, copied in one 2D box of u64 (32 x 16, 4096 bytes); no
// fence.proxy.async between the copy and the wgmma, and no barrier between
// the wait and the wgmma.
alignas(16) uint16_t gOperands[2048];
int gSkipTmaWait;

void tmaWgmmaThread(void **, int32_t, int32_t, int32_t, int32_t, int32_t,
                    int32_t) {
  int t = kiln_emu_thread_id();
  int64_t bar = smem(4096), map = address(gMapSlot[2]);
  if (t == 0) {
    buildMap(gMapSlot[2], {gOperands, 2, kTypeU64, {32, 16}, {256}, {32, 16}});
    kiln_emu_mbarrier_init(bar, 1);
    kiln_emu_fence_proxy_async(); // for the mbarrier's init, not the data
  }
  kiln_emu_barrier();
  if (t == 0) {
    kiln_emu_mbarrier_arrive_expect_tx(bar, 4096);
    kiln_emu_tma_load(smem(0), map, 2, 0, 0, 0, 0, 0, bar, "operands");
  }
  if (!gSkipTmaWait)
    kiln_emu_mbarrier_wait(bar, 0);
  issueWgmma(descriptor(0, aLbo(), aSbo()), descriptor(kBOff, bLbo(), bSbo()),
             1, "wgmma");
}
} // namespace

TEST_CASE("wgmma reads TMA-written operands without a proxy fence", "[emu]") {
  randomWgmmaOperands(13);
  forEachTranspose([] {
    std::memset(gOperands, 0, sizeof gOperands);
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k)
        gOperands[canonical(m, k, wTransA, aLbo(), aSbo()) / 2] =
            toBF16(wA[m][k]);
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < kWgN; ++n)
        gOperands[(kBOff + canonical(n, k, wTransB, bLbo(), bSbo())) / 2] =
            toBF16(wB[k][n]);
    run(tmaWgmmaThread, nullptr, 128, 4096 + 128);
    checkWgmmaAccumulators(1);
  });
}

namespace {
// The checkers' kernels (128 threads): a 16 x 16 f32 tensor read in 16 x 8
// boxes (512 bytes) into stages at shared bytes 0 and 512, one mbarrier at
// 1024; thread 0 builds the map and the mbarrier and issues the copies.
alignas(16) float gSmall[16][16];
constexpr int64_t kStage = 512, kCheckBar = 1024, kCheckShared = 1152;
int gRelease = 1, gAcquire = 1, gInitFence = 1, gSwizzle = 0;

int64_t checkMap() { return address(gMapSlot[3]); }
int64_t checkBar() { return smem(kCheckBar); }

void checkSetup() {
  if (kiln_emu_thread_id() == 0) {
    buildMap(gMapSlot[3], {gSmall, 2, kTypeF32, {16, 16}, {64}, {16, 8}},
             gRelease, gAcquire, gSwizzle);
    kiln_emu_mbarrier_init(checkBar(), 1);
    if (gInitFence)
      kiln_emu_fence_proxy_async();
  }
  kiln_emu_barrier();
}

/// Thread 0 fills the stage at `dst` with rows `row`..: arrive.expect_tx
/// (the box's bytes, plus `extraTx`), then the copy.
void checkFill(int64_t dst, int32_t row, int32_t extraTx = 0) {
  kiln_emu_mbarrier_arrive_expect_tx(checkBar(), int32_t(kStage) + extraTx);
  kiln_emu_tma_load(smem(dst), checkMap(), 2, 0, row, 0, 0, 0, checkBar(),
                    "the tma");
}

void (*gTmaBody)();

/// Runs `body` as every thread of a 128-thread block.
void runTma(void (*body)()) {
  gTmaBody = body;
  run([](void **, int32_t, int32_t, int32_t, int32_t, int32_t,
         int32_t) { gTmaBody(); },
      nullptr, 128, kCheckShared);
}

bool has(const std::string &err, const char *text) {
  return err.find(text) != std::string::npos;
}
} // namespace

TEST_CASE("the TMA and mbarrier checkers fire", "[emu]") {
  SECTION("the pipeline done right passes (the checks below break it)") {
    auto [aborted, err] = inChild([] {
      runTma([] {
        int t = kiln_emu_thread_id();
        checkSetup();
        if (t == 0)
          checkFill(0, 0);
        kiln_emu_mbarrier_wait(checkBar(), 0);
        (void)load(4 * t);
        kiln_emu_barrier();
        if (t == 0)
          checkFill(0, 8);
        kiln_emu_mbarrier_wait(checkBar(), 1);
        (void)load(4 * t);
      });
    });
    INFO(err);
    CHECK_FALSE(aborted);
    CHECK(err.empty());
  }
  SECTION("reading TMA bytes without waiting on the mbarrier") {
    auto [aborted, err] = inChild([] {
      runTma([] {
        checkSetup();
        if (kiln_emu_thread_id() == 0)
          checkFill(0, 0);
        kiln_emu_barrier(); // not a wait
        (void)load(4 * kiln_emu_thread_id());
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "load: reads bytes of a TMA copy (the tma) before "
                   "waiting on its mbarrier"));
  }
  SECTION("wgmma reading TMA bytes without waiting on the mbarrier") {
    auto [aborted, err] = inChild([] {
      gSkipTmaWait = 1;
      run(tmaWgmmaThread, nullptr, 128, 4096 + 128);
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "wgmma: reads bytes of a TMA copy (operands) before "
                   "waiting on its mbarrier"));
  }
  SECTION("a wait for the wrong parity") {
    // The stale wait returns at once (phase 0 has completed), so the last
    // thread through the barrier reads the stage before thread 0 refills
    // it: the refill races with that read. (A thread reaching the wait after
    // the refill would block for good, as phase 2 is then current.)
    auto [aborted, err] = inChild([] {
      runTma([] {
        int t = kiln_emu_thread_id();
        checkSetup();
        if (t == 0)
          checkFill(0, 0);
        kiln_emu_mbarrier_wait(checkBar(), 0);
        (void)load(4 * t);
        kiln_emu_barrier();
        if (t == 0)
          checkFill(0, 8);
        kiln_emu_mbarrier_wait(checkBar(), 0); // phase 1 has parity 1
        (void)load(4 * t);
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "thread 0 (warp 0): data race on shared byte 508: "
                   "written here (the tma), and another thread read it"));
  }
  SECTION("a TMA into a stage another thread read since the last barrier") {
    auto [aborted, err] = inChild([] {
      runTma([] {
        int t = kiln_emu_thread_id();
        checkSetup();
        if (t == 0)
          checkFill(0, 0);
        kiln_emu_mbarrier_wait(checkBar(), 0);
        (void)load(4 * t);
        (void)kiln_emu_shfl_xor_b32(0, 1, 32); // lane 1 has read
        if (t == 0)
          checkFill(0, 8); // no barrier since the reads
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "data race on shared byte 4: written here (the tma), and "
                   "another thread read it since the last barrier"));
  }
  SECTION("a TMA with a map its thread did not acquire") {
    auto [aborted, err] = inChild([] {
      gAcquire = 0;
      runTma([] {
        checkSetup();
        if (kiln_emu_thread_id() == 0)
          checkFill(0, 0);
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "the tma: cp.async.bulk.tensor with the tensor map"));
    CHECK(has(err, "this thread has not acquired it "
                   "(fence.proxy.tensormap::generic.acquire) since thread 0 "
                   "released it"));
  }
  SECTION("a TMA with a map not released after its last replace") {
    auto [aborted, err] = inChild([] {
      gRelease = 0;
      runTma([] {
        checkSetup();
        if (kiln_emu_thread_id() == 0)
          checkFill(0, 0);
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "thread 0 modified it (tensormap.replace) with no "
                   "fence.proxy.tensormap::generic.release after it"));
  }
  SECTION("a TMA with a map stored to after its release") {
    auto [aborted, err] = inChild([] {
      runTma([] {
        checkSetup();
        if (kiln_emu_thread_id() == 0) {
          gMapSlot[3][0] ^= 16; // an ordinary store, not a replace
          checkFill(0, 0);
        }
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "its bytes changed since its release"));
  }
  SECTION("TMA swizzles the emulator does not model") {
    // 64B (2); 128B (3) with box rows of 64 bytes, not 128.
    for (auto [mode, expected] :
         {std::pair<int, const char *>{2, "swizzle_mode 2 is not supported by "
                                          "the emulator"},
          {3, "swizzle_mode 128B with box_dim[0] 16 elements of 4 bytes"}}) {
      gSwizzle = mode;
      auto [aborted, err] = inChild([] {
        runTma([] {
          checkSetup();
          if (kiln_emu_thread_id() == 0)
            checkFill(0, 0);
        });
      });
      INFO(err);
      CHECK(aborted);
      CHECK(has(err, expected));
    }
    gSwizzle = 0;
  }
  SECTION("a TMA to a destination not 128-byte aligned") {
    auto [aborted, err] = inChild([] {
      runTma([] {
        checkSetup();
        if (kiln_emu_thread_id() == 0)
          checkFill(64, 0);
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "destination (shared byte 64) is not 128-byte aligned"));
  }
  SECTION("a wait that never ends") {
    auto [aborted, err] = inChild([] {
      runTma([] {
        checkSetup();
        if (kiln_emu_thread_id() == 0)
          checkFill(0, 0, 16); // expects 16 bytes no copy brings
        kiln_emu_mbarrier_wait(checkBar(), 0);
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "deadlocks: 0 threads wait at a barrier, 0 at a warp "
                   "collective, 128 on an mbarrier, 0 at a named barrier, "
                   "0 have exited; the "
                   "mbarrier at shared byte 1024 (128 waiting) never "
                   "completes its phase 0: 0 of 1 arrivals and 16 "
                   "transaction bytes pending"));
  }
  SECTION("a thread that exits with a TMA in flight") {
    auto [aborted, err] = inChild([] {
      runTma([] {
        checkSetup();
        if (kiln_emu_thread_id() == 0) // no arrive: the phase never ends
          kiln_emu_tma_load(smem(0), checkMap(), 2, 0, 0, 0, 0, 0, checkBar(),
                            "the tma");
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "thread 0 (warp 0): exits with TMA copies in flight: the "
                   "tma"));
  }
  SECTION("a block that ends before anyone waits for its TMA") {
    auto [aborted, err] = inChild([] {
      runTma([] {
        checkSetup();
        if (kiln_emu_thread_id() == 0)
          checkFill(kStage, 0);
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "ends with TMA copies in flight: no thread waited for "
                   "phase 0 of the mbarrier at shared byte 1024, which "
                   "completes the tma"));
  }
  SECTION("an ordinary load of an mbarrier") {
    auto [aborted, err] = inChild([] {
      runTma([] {
        checkSetup();
        (void)load(kCheckBar);
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "load: shared-memory load touches byte 1024 of the "
                   "mbarrier at shared byte 1024"));
  }
  SECTION("an mbarrier nobody initialized") {
    auto [aborted, err] =
        inChild([] { runTma([] { kiln_emu_mbarrier_wait(checkBar(), 0); }); });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "mbarrier.try_wait.parity on the mbarrier at shared byte "
                   "1024, which no thread of this block initialized"));
  }
  SECTION("an mbarrier used with no barrier since its init") {
    auto [aborted, err] = inChild([] {
      runTma([] {
        if (kiln_emu_thread_id() == 0)
          kiln_emu_mbarrier_init(checkBar(), 1);
        kiln_emu_mbarrier_wait(checkBar(), 1);
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "thread 1 (warp 0): mbarrier.try_wait.parity on the "
                   "mbarrier at shared byte 1024, which thread 0 initialized "
                   "with no barrier since"));
  }
  SECTION("an mbarrier init the async proxy may not see") {
    auto [aborted, err] = inChild([] {
      gInitFence = 0;
      runTma([] {
        checkSetup();
        if (kiln_emu_thread_id() == 0)
          checkFill(0, 0);
      });
    });
    INFO(err);
    CHECK(aborted);
    CHECK(has(err, "which thread 0 initialized with no fence.proxy.async"));
  }
}
