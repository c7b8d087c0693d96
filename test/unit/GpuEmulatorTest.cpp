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
// groups) and show that each checker fires: a checker that cannot fail would
// make every emulated test vacuous. Failing checks abort, so those run in a
// forked child whose stderr is captured.
//
//===----------------------------------------------------------------------===//

#include <catch2/catch.hpp>

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
void kiln_emu_wgmma_fence(void);
void kiln_emu_wgmma_commit(void);
void kiln_emu_wgmma_wait(int32_t n);
void kiln_emu_wgmma(int64_t descA, int64_t descB, int32_t n, int32_t isF16,
                    int32_t transA, int32_t transB, int32_t scaleD,
                    int64_t acc, const char *site);
void kiln_emu_mma_m16n8k16(int32_t isF16, int32_t a0, int32_t a1, int32_t a2,
                           int32_t a3, int32_t b0, int32_t b1, float c0,
                           float c1, float c2, float c3, int64_t out);
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
    auto put = [](int64_t off, float v) {
      uint16_t h = toBF16(v);
      kiln_emu_shared_access(kiln_emu_shared() + off, 2, 1, "setup");
      std::memcpy(reinterpret_cast<char *>(kiln_emu_shared() + off), &h, 2);
    };
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k)
        put(canonical(m, k, wTransA, aLbo(), aSbo()), wA[m][k]);
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < kWgN; ++n)
        put(kBOff + canonical(n, k, wTransB, bLbo(), bSbo()), wB[k][n]);
    if (!wSkipProxyFence)
      kiln_emu_fence_proxy_async(); // generic writes, async-proxy reads
  }
  kiln_emu_barrier();
  float *d = wD[t];
  for (int i = 0; i < kWgN / 2; ++i)
    d[i] = 1;
  kiln_emu_wgmma_fence();
  kiln_emu_wgmma(descriptor(0, aLbo(), aSbo()),
                 descriptor(kBOff, bLbo(), bSbo()), kWgN, 0, wTransA, wTransB,
                 wScaleD, int64_t(reinterpret_cast<uintptr_t>(d)), "wgmma");
  kiln_emu_wgmma_commit();
  kiln_emu_wgmma_wait(0);
}
} // namespace

TEST_CASE("wgmma m64nNk16 follows the PTX layouts and descriptors", "[emu]") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> d(-4, 4);
  for (auto &r : wA)
    for (float &x : r)
      x = float(d(rng));
  for (auto &r : wB)
    for (float &x : r)
      x = float(d(rng));
  for (int variant = 0; variant < 8; ++variant) {
    wTransA = variant & 1;
    wTransB = variant >> 1 & 1;
    wScaleD = variant >> 2 & 1;
    INFO("trans-a " << wTransA << ", trans-b " << wTransB << ", scale-d "
                    << wScaleD);
    run(wgmmaThread, nullptr, 128, 4096);
    // Accumulator D of m64nNk16 (PTX ISA figure): warp w holds rows
    // 16 w + lane / 4 (+ 8 for d[i], i % 4 >= 2), columns
    // 2 (lane % 4) + (i % 2) + 8 (i / 4).
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < kWgN / 2; ++i) {
        int w = t / 32, lane = t % 32;
        int row = 16 * w + lane / 4 + (i % 4 >= 2 ? 8 : 0);
        int col = 2 * (lane % 4) + (i % 2) + 8 * (i / 4);
        double ref = wScaleD ? 1 : 0;
        for (int k = 0; k < 16; ++k)
          ref += double(wA[row][k]) * wB[k][col];
        CHECK(wD[t][i] == ref);
      }
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

TEST_CASE("cp.async lands at wait_group, zero-fills, poison before", "[emu]") {
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
        o[t] = load(4 * t); // not landed yet: the 0xFF poison (NaN)
        kiln_emu_cp_async_wait(0);
        kiln_emu_barrier();
        o[64 + t] = load(4 * ((t + 1) % 64));
      },
      argv, 64, 256);
  for (int t = 0; t < 64; ++t) {
    CHECK(std::isnan(got[t]));
    int s = (t + 1) % 64;
    CHECK(got[64 + t] == (s == 63 ? 0.0f : src[s]));
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
  SECTION("a barrier with wgmma in flight") {
    auto [aborted, err] = inChild([] {
      run(
          [](void **, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t) {
            float d[4] = {};
            kiln_emu_wgmma_fence();
            kiln_emu_wgmma(descriptor(0, 128, 256), descriptor(0, 128, 256),
                           8, 0, 0, 0, 1,
                           int64_t(reinterpret_cast<uintptr_t>(d)), "the mma");
            kiln_emu_wgmma_commit();
            kiln_emu_barrier(); // no wgmma.wait_group first
          },
          nullptr, 128, 4096);
    });
    CHECK(aborted);
    CHECK(err.find("barrier with wgmma.mma_async operations in flight") !=
          std::string::npos);
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
