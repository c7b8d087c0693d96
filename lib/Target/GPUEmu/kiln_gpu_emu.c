/*===- kiln_gpu_emu.c - A SIMT emulator for the GPU lowering's kernels -----===//
 *
 * Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
 * SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
 *
 *===----------------------------------------------------------------------===//
 *
 * Kernels compiled for an `emu-sm_XY` target are the GPU lowering's SIMT code
 * (kiln-emulate-gpu turned its GPU operations into calls to this file). This
 * object is linked into each such bundle, so the CPU runtime launches it like
 * any CPU kernel: kiln_entry_NAME runs one thread block per program id.
 *
 * A block's threads are fibers on one host thread, switched at every
 * synchronisation point (barrier, warp shuffle, mma.sync, wgmma) by a small
 * x86-64 context switch. What it checks, beyond computing the kernel's results:
 *
 *   - barriers: every thread must reach each barrier; a thread that exits
 *     while others wait, or a wait that can never end, is a deadlock;
 *   - named barriers (bar.sync / bar.arrive id, count): a phase completes at
 *     `count` arrivals; a block may not end in the middle of a phase, and
 *     the arrivals of one phase must agree on the count. They order
 *     execution, not shared memory (the race checker ignores them);
 *   - shared memory: the window is filled with 0xFF (NaN) before each block;
 *     every access must lie inside the kernel's shared_bytes; two threads
 *     touching one byte between two barriers, at least one writing, is a
 *     data race;
 *   - cp.async: copies land only when a cp.async.wait_group retires their
 *     group (reading early sees the poison); a copy counts as a write from
 *     its issue (racing with other threads' accesses since the last
 *     barrier); a thread may not exit with copies in flight;
 *   - warp collectives follow the PTX ISA: shfl.bfly within width segments,
 *     mma.sync.m16n8k16 fragments as the ISA lays them out (row-major A,
 *     column-major B, f32 C/D);
 *   - wgmma.mma_async.m64nNk16 is a warpgroup collective with uniform
 *     descriptors, operands read through the no-swizzle or 128B-swizzle canonical layouts,
 *     and the fence / commit_group / wait_group protocol checked: an
 *     operation's reads of shared memory last until its group is retired,
 *     so a write of those bytes must come after a barrier that every thread
 *     of the warpgroup reached having retired it; no exit with operations
 *     in flight;
 *   - mbarriers (init, arrive.expect_tx, try_wait.parity) follow the PTX
 *     ISA's phases, arrival and transaction counts; each lives in a side
 *     table of the block: it must be initialised, 8-byte aligned, used by
 *     other threads only after a barrier since its init, and its 8 bytes
 *     are never touched by ordinary accesses; a wait yields, so waiting
 *     forever is a deadlock that names the mbarrier;
 *   - tensor maps are built with tensormap.replace (in the emulator's own
 *     layout of the 128 bytes) and validated at each copy (rank, alignment,
 *     dims, strides, box; non-interleaved, zero-fill maps, no swizzle or
 *     the 128B swizzle of 128-byte box rows into 1024-byte aligned
 *     destinations), and TMA stores (cp.async.bulk.tensor shared -> global,
 *     no swizzle) whose shared bytes must have been fenced by their writers
 *     and which their thread must wait for (cp.async.bulk.wait_group)
 *     before its next barrier or exit; the writer must release them (fence.proxy.tensormap::generic)
 *     after its last replace and the issuing thread acquire them after that
 *     release;
 *   - cp.async.bulk.tensor (TMA) copies a box at issue, zero-filling what
 *     lies outside the tensor, and completes its bytes on an mbarrier (whose
 *     init the async proxy must see: a fence.proxy.async after it). It is a
 *     write from its issue (racing with other threads' accesses since the
 *     last barrier); its bytes may be read or written (by any thread, wgmma
 *     included) only by a thread that has waited for the mbarrier phase it
 *     belongs to, which then orders them without a barrier, and wgmma reads
 *     them without a fence.proxy.async (they are async-proxy writes); a
 *     thread may not exit while a copy it issued is incomplete, nor a block
 *     end with a copy whose completion no thread waited for;
 *   - with KILN_EMU_BANK_CONFLICTS=fail in the environment, an ldmatrix
 *     whose 8x8 matrix cannot be read in one shared-memory wavefront (its
 *     eight 16-byte rows put two different words in one of the 32 banks) is
 *     a failed check naming the conflict's degree: a performance property
 *     the layouts promise (padded or XOR-swizzled mma.sync operand rows),
 *     checked where no GPU is at hand. KILN_EMU_BANK_CONFLICTS=report
 *     prints each conflicting site once (to stderr) and goes on. Off by
 *     default.
 *
 * A failed check is a compiler bug: the emulator prints what, where (block,
 * thread, address) and aborts. It is a testing target; it makes no attempt
 * at speed.
 *
 *===----------------------------------------------------------------------===*/

#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#if !defined(__x86_64__)
#error "the kiln GPU emulator supports x86-64 hosts"
#endif

#define EMU_API __attribute__((visibility("hidden")))

enum { kMaxThreads = 1024, kWarp = 32, kStackBytes = 256 * 1024 };
enum { kSharedCapacity = 256 * 1024 };

typedef void (*thread_fn)(void **, int32_t, int32_t, int32_t, int32_t,
                          int32_t, int32_t);

/* Saves the callee-saved registers, MXCSR and the x87 control word on the
 * current stack, stores the stack pointer in *save and continues on `next`. */
void kiln_emu_switch(void **save, void *next);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl kiln_emu_switch\n"
        ".hidden kiln_emu_switch\n"
        ".type kiln_emu_switch,@function\n"
        "kiln_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n"
        "  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n"
        "  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size kiln_emu_switch, .-kiln_emu_switch\n");

typedef struct {
  uint64_t dst, src, bytes, src_bytes;
  const char *site;
  uint64_t group; /* UINT64_MAX while not committed */
} pending_copy;

typedef struct {
  void *sp;
  char *stack;
  int finished;
  int waiting; /* 0 running, 1 block barrier, 2 warp collective, 3 mbarrier,
                 4 named barrier */
  int wait_bar; /* the mbarrier (index) waited for when waiting == 3, the
                  named barrier when 4 */
  pending_copy *copies;
  size_t num_copies, cap_copies;
  uint64_t next_group;
  /* wgmma: a fence since the accumulators were last handed back, issued
   * operations not yet committed, committed groups not yet retired. */
  int wg_fenced;
  int wg_uncommitted;
  int wg_groups;
  uint32_t wg_committed; /* groups committed in this block */
  /* TMA stores (cp.async.bulk.tensor shared -> global): issued and not
   * committed, committed bulk groups not waited for. */
  int bulk_uncommitted, bulk_groups;
  /* Their global writes, made when a wait retires their group (so a read
   * of the destination before it sees the old values): the element's
   * address, size, bytes and group (UINT64_MAX until committed). */
  struct bulk_write {
    uint64_t dst, group;
    int32_t bytes;
    unsigned char data[8];
  } *bulk_writes;
  size_t num_bulk_writes, cap_bulk_writes;
  uint64_t next_bulk_group;
  /* fence.proxy.async count (wgmma reads need the writer's fence) */
  uint64_t proxy_fences;
} fiber;

/* Per byte of the window: who last wrote and read it, in which epoch. */
typedef struct {
  uint64_t w_epoch, r_epoch;
  int32_t w_tid, r_tid; /* r_tid -2: several readers */
  const char *w_site, *r_site;
  uint64_t w_proxy; /* the writer's async-proxy fence count at the write */
  /* The last write was a TMA copy (w_epoch in this block) completing on
   * mbarrier tma_bar - 1 in its phase tma_phase; 0: a generic write. */
  int32_t tma_bar;
  /* 1 + the index of the mbarrier this byte belongs to, when it is one of
   * the block's (see mbarrier_byte); stale values are ignored. */
  int32_t mbar;
  uint64_t tma_phase;
  /* wgmma reads: per warpgroup, the group (1-based, in its commit order) of
   * the last wgmma.mma_async that read this byte; 0: none. Valid when
   * wg_block is this block's epoch. */
  uint64_t wg_block;
  uint32_t wg_group[kMaxThreads / 128];
  /* cp.async copies to this byte issued and not yet landed (valid when
   * cp_block is this block's epoch), and the site of the last one. */
  uint64_t cp_block;
  int32_t cp_pending;
  const char *cp_site;
} shadow;

enum { kMaxMbarriers = 32, kMaxTensorMaps = 16, kTensorMapBytes = 128 };

/* An mbarrier of the block. Its state lives here, not in its 8 bytes of
 * shared memory (which ordinary accesses may not touch). */
typedef struct {
  int64_t off; /* in the shared window */
  int32_t count, pending;
  int64_t tx;
  uint64_t phase; /* phases completed (in this slot, over its mbarriers) */
  uint64_t phase0; /* phase at init: the current parity is phase - phase0 */
  int32_t init_tid;
  uint64_t init_epoch, init_proxy;
  /* 1 + the phase the last TMA on it belongs to (0: none), and its site */
  uint64_t tma_phase;
  const char *tma_site;
  uint32_t tma_issuers[kMaxThreads / 32]; /* TMAs in the current phase */
} mbarrier;

/* The emulator's layout of a tensor map's 128 bytes, which the kernel
 * zero-fills and then sets with tensormap.replace: `set` says which fields
 * (and ordinals) were replaced. Narrow fields saturate. */
typedef struct {
  uint64_t global_address;
  uint64_t global_dim[5];
  uint64_t global_stride[4];
  uint16_t box_dim[5];
  uint8_t element_stride[5];
  uint8_t rank_m1, elemtype, interleave, swizzle, fill;
  uint32_t set;
  uint32_t encoded; /* kEncodedMagic when kiln_emu_tensormap_encode wrote it */
} tensor_map;
enum { kEncodedMagic = 0x50414d4b /* "KMAP" */ };
_Static_assert(sizeof(tensor_map) <= kTensorMapBytes,
               "the emulator's tensor map must fit in 128 bytes");

/* tensor_map.set bits, by field (ordinals follow their field's bit) */
enum {
  kSetAddress = 0, kSetRank = 1, kSetBoxDim = 2, kSetGlobalDim = 7,
  kSetGlobalStride = 12, kSetElementStride = 16, kSetElemType = 21,
  kSetInterleave = 22, kSetSwizzle = 23, kSetFill = 24,
  /* encoded by the runtime at launch (kiln_emu_tensormap_encode): a kernel
   * parameter, valid without the build/release/acquire protocol */
  kSetEncoded = 31
};

/* The release / acquire protocol of a tensor map modified in this block. */
typedef struct {
  int64_t addr;
  int32_t writer; /* the last thread to tensormap.replace it; -1: none */
  uint64_t replaced, released; /* clocks of the last replace, of the first
                                  release after it (0: none) */
  unsigned char image[kTensorMapBytes]; /* its bytes at that release */
} tensormap_state;

typedef struct {
  thread_fn fn;
  void **argv;
  const char *name;
  int32_t pid[3], grid[3];
  int num_threads;
  int64_t shared_bytes;
  int current;
  void *sched_sp;
  uint64_t progress;
  /* block barrier */
  uint64_t bar_gen;
  int bar_arrived;
  /* named barriers 1..15 (bar.sync / bar.arrive id, count): arrivals in the
   * current phase and the thread count that phase expects */
  uint64_t nbar_gen[16];
  int nbar_arrived[16];
  int nbar_count[16];
  /* warp collectives */
  uint64_t warp_gen[kMaxThreads / kWarp];
  int warp_arrived[kMaxThreads / kWarp];
  uint64_t shfl[kMaxThreads / kWarp][kWarp];
  uint32_t mma_a[kMaxThreads / kWarp][kWarp][4];
  uint32_t mma_b[kMaxThreads / kWarp][kWarp][2];
  int64_t ldm_addr[kMaxThreads / kWarp][kWarp];
  int bank_check; /* KILN_EMU_BANK_CONFLICTS: 1 fail, 2 report (each block) */
  /* warpgroup collectives (wgmma) */
  uint64_t wg_gen[kMaxThreads / 128];
  int wg_arrived[kMaxThreads / 128];
  uint64_t wg_desc[kMaxThreads][2];
  uint32_t wg_areg[kMaxThreads][4]; /* wgmma with A in registers */
  /* Per warpgroup: the groups every thread of it had retired at the last
   * barrier (so every thread knows they no longer read shared memory). */
  uint32_t wg_safe[kMaxThreads / 128];
  /* shared memory and its checker */
  uint64_t epoch; /* advances at every barrier and every block */
  uint64_t block_epoch; /* the epoch this block started in */
  unsigned char *smem;
  shadow *shadow;
  /* mbarriers and the phases each thread has observed (waited for) */
  mbarrier mbars[kMaxMbarriers];
  int num_mbars;
  uint64_t mb_seen[kMaxThreads][kMaxMbarriers];
  /* tensor maps: events are ordered by tm_clock */
  tensormap_state maps[kMaxTensorMaps];
  int num_maps;
  uint64_t tm_clock;
  uint64_t tm_acquired[kMaxThreads][kMaxTensorMaps];
  /* A kiln.assert failed (kiln_emu_assert_fail): the block stops. */
  const char *assert_msg, *assert_site;
  int assert_thread;
  int64_t assert_hook;
  fiber fibers[kMaxThreads];
} block_state;

static __thread block_state *S;

__attribute__((format(printf, 1, 2), noreturn)) static void
fail(const char *fmt, ...) {
  block_state *s = S;
  fprintf(stderr,
          "kiln GPU emulator: kernel '%s', block (%d,%d,%d), thread %d "
          "(warp %d): ",
          s->name, s->pid[0], s->pid[1], s->pid[2], s->current,
          s->current / kWarp);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  abort();
}

static void yield(void) {
  block_state *s = S;
  kiln_emu_switch(&s->fibers[s->current].sp, s->sched_sp);
}

static void fiber_main(void) {
  block_state *s = S;
  fiber *f = &s->fibers[s->current];
  s->fn(s->argv, s->pid[0], s->pid[1], s->pid[2], s->grid[0], s->grid[1],
        s->grid[2]);
  for (size_t i = 0; i < f->num_copies; ++i)
    if (f->copies[i].bytes)
      fail("exits with cp.async copies in flight (no wait_group retired "
           "them): %s",
           f->copies[i].site);
  if (f->wg_uncommitted || f->wg_groups)
    fail("exits with wgmma.mma_async operations in flight (no "
         "wgmma.wait_group retired them)");
  if (f->bulk_uncommitted || f->bulk_groups)
    fail("exits with TMA stores in flight (no cp.async.bulk.wait_group "
         "retired them)");
  for (int k = 0; k < s->num_mbars; ++k) {
    mbarrier *m = &s->mbars[k];
    if (m->tma_issuers[s->current / 32] >> (s->current % 32) & 1)
      fail("exits with TMA copies in flight: %s (its mbarrier, at shared "
           "byte %lld, is still in phase %llu: %d arrivals and %lld "
           "transaction bytes pending)",
           m->tma_site, (long long)m->off, (unsigned long long)m->phase,
           m->pending, (long long)m->tx);
  }
  f->finished = 1;
  s->progress++;
  for (;;)
    yield(); /* the scheduler never resumes a finished fiber */
}

/* A kiln.assert failed in the current thread: the block stops here (no
 * other thread runs again, none of the exit checks apply) and
 * kiln_emu_run_block reports it through the kernel's hook. */
EMU_API void kiln_emu_assert_fail(int64_t message, int64_t site, int64_t hook) {
  block_state *s = S;
  if (!s->assert_msg) {
    s->assert_msg = (const char *)(uintptr_t)message;
    s->assert_site = (const char *)(uintptr_t)site;
    s->assert_thread = s->current;
    s->assert_hook = hook;
  }
  for (;;)
    yield();
}

static block_state *state(void) {
  if (S)
    return S;
  block_state *s = (block_state *)calloc(1, sizeof(block_state));
  /* The window is aligned to its capacity (256 KiB), so that a wgmma
   * matrix descriptor's 18-bit address field names a byte of it, as a
   * shared-memory address does on the GPU. */
  void *smem = mmap(NULL, 2 * kSharedCapacity, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (smem != MAP_FAILED)
    smem = (void *)(((uintptr_t)smem + kSharedCapacity - 1) &
                    ~(uintptr_t)(kSharedCapacity - 1));
  void *sh = mmap(NULL, kSharedCapacity * sizeof(shadow),
                  PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (!s || smem == MAP_FAILED || sh == MAP_FAILED) {
    fprintf(stderr, "kiln GPU emulator: out of memory\n");
    abort();
  }
  s->smem = (unsigned char *)smem;
  s->shadow = (shadow *)sh;
  S = s;
  return s;
}

EMU_API void kiln_emu_run_block(thread_fn fn, void **argv, int32_t px,
                                int32_t py, int32_t pz, int32_t gx, int32_t gy,
                                int32_t gz, int32_t num_threads,
                                int64_t shared_bytes, const char *name) {
  block_state *s = state();
  if (num_threads < 1 || num_threads > kMaxThreads ||
      num_threads % kWarp != 0 || shared_bytes < 0 ||
      shared_bytes > kSharedCapacity) {
    fprintf(stderr,
            "kiln GPU emulator: unsupported launch (%d threads, %lld bytes "
            "of shared memory)\n",
            num_threads, (long long)shared_bytes);
    abort();
  }
  s->fn = fn;
  s->argv = argv;
  s->name = name;
  {
    const char *bank = getenv("KILN_EMU_BANK_CONFLICTS");
    s->bank_check = !bank                        ? 0
                    : strcmp(bank, "fail") == 0   ? 1
                    : strcmp(bank, "report") == 0 ? 2
                                                  : 0;
  }
  s->pid[0] = px, s->pid[1] = py, s->pid[2] = pz;
  s->grid[0] = gx, s->grid[1] = gy, s->grid[2] = gz;
  s->num_threads = num_threads;
  s->shared_bytes = shared_bytes;
  s->bar_gen = 0;
  s->bar_arrived = 0;
  memset(s->nbar_arrived, 0, sizeof s->nbar_arrived);
  memset(s->warp_arrived, 0, sizeof s->warp_arrived);
  memset(s->wg_arrived, 0, sizeof s->wg_arrived);
  memset(s->wg_safe, 0, sizeof s->wg_safe);
  s->num_mbars = 0;
  s->num_maps = 0;
  s->epoch++;
  s->block_epoch = s->epoch;
  memset(s->smem, 0xFF, (size_t)shared_bytes);
  s->assert_msg = NULL;
  for (int t = 0; t < num_threads; ++t) {
    fiber *f = &s->fibers[t];
    if (!f->stack) {
      f->stack = (char *)mmap(NULL, kStackBytes, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                              0);
      if (f->stack == MAP_FAILED) {
        fprintf(stderr, "kiln GPU emulator: cannot map a fiber stack\n");
        abort();
      }
    }
    /* The first switch "returns" into fiber_main with the stack aligned as
     * after a call: [mxcsr|fcw] r15 r14 r13 r12 rbx rbp ret. */
    uint64_t *sp = (uint64_t *)(f->stack + kStackBytes - 8 - 64);
    uint32_t ctl[2] = {0x1F80, 0x037F};
    memcpy(&sp[0], ctl, 8);
    for (int i = 1; i < 7; ++i)
      sp[i] = 0;
    sp[7] = (uint64_t)(uintptr_t)&fiber_main;
    f->sp = sp;
    f->finished = 0;
    f->waiting = 0;
    f->num_copies = 0;
    f->next_group = 0;
    f->wg_fenced = 0;
    f->wg_uncommitted = 0;
    f->wg_groups = 0;
    f->wg_committed = 0;
    f->bulk_uncommitted = 0;
    f->bulk_groups = 0;
    f->num_bulk_writes = 0;
    f->next_bulk_group = 0;
    f->proxy_fences = 0;
  }
  int remaining = num_threads;
  while (remaining > 0) {
    uint64_t before = s->progress;
    for (int t = 0; t < num_threads; ++t) {
      if (s->fibers[t].finished)
        continue;
      s->current = t;
      kiln_emu_switch(&s->sched_sp, s->fibers[t].sp);
      if (s->assert_msg)
        break;
      if (s->fibers[t].finished)
        remaining--;
    }
    if (s->assert_msg) {
      /* The hook does not return: it jumps back into the runtime, which
       * fails the launch. Fiber state is reset by the next block. */
      typedef void (*hook_fn)(const char *, const char *, int32_t, int32_t,
                              int32_t, int32_t);
      uint64_t raw;
      memcpy(&raw, (const void *)(uintptr_t)s->assert_hook, sizeof raw);
      if (!raw) {
        fprintf(stderr,
                "kiln GPU emulator: kernel '%s', block (%d,%d,%d), thread "
                "%d: device assertion failed at %s: %s (and no runtime "
                "installed the kernel's kiln_assert_hook)\n",
                name, px, py, pz, s->assert_thread, s->assert_site,
                s->assert_msg);
        abort();
      }
      ((hook_fn)(uintptr_t)raw)(s->assert_msg, s->assert_site, px, py, pz,
                                s->assert_thread);
      abort(); /* (the hook returned) */
    }
    if (remaining > 0 && s->progress == before) {
      int at_barrier = 0, at_warp = 0, at_mbar = 0, at_named = 0, done = 0;
      for (int t = 0; t < num_threads; ++t) {
        at_barrier += s->fibers[t].waiting == 1 && !s->fibers[t].finished;
        at_named += s->fibers[t].waiting == 4 && !s->fibers[t].finished;
        at_warp += s->fibers[t].waiting == 2 && !s->fibers[t].finished;
        at_mbar += s->fibers[t].waiting == 3 && !s->fibers[t].finished;
        done += s->fibers[t].finished;
      }
      s->current = 0;
      fprintf(stderr,
              "kiln GPU emulator: kernel '%s', block (%d,%d,%d) deadlocks: "
              "%d threads wait at a barrier, %d at a warp collective, %d on "
              "an mbarrier, %d at a named barrier, %d have exited",
              name, px, py, pz, at_barrier, at_warp, at_mbar, at_named, done);
      for (int id = 1; id < 16; ++id) {
        int waiters = 0;
        for (int t = 0; t < num_threads; ++t)
          waiters += s->fibers[t].waiting == 4 && !s->fibers[t].finished &&
                     s->fibers[t].wait_bar == id;
        if (waiters)
          fprintf(stderr,
                  "; named barrier %d (%d waiting): %d of %d threads arrived",
                  id, waiters, s->nbar_arrived[id], s->nbar_count[id]);
      }
      for (int k = 0; k < s->num_mbars; ++k) {
        int waiters = 0;
        for (int t = 0; t < num_threads; ++t)
          waiters += s->fibers[t].waiting == 3 && !s->fibers[t].finished &&
                     s->fibers[t].wait_bar == k;
        mbarrier *m = &s->mbars[k];
        if (waiters)
          fprintf(stderr,
                  "; the mbarrier at shared byte %lld (%d waiting) never "
                  "completes its phase %llu: %d of %d arrivals and %lld "
                  "transaction bytes pending",
                  (long long)m->off, waiters, (unsigned long long)m->phase,
                  m->pending, m->count, (long long)m->tx);
      }
      fprintf(stderr, "\n");
      abort();
    }
  }
  /* A named barrier left with arrivals is a schedule that does not balance
   * (the next block on the SM would start in its phase). */
  for (int id = 1; id < 16; ++id)
    if (s->nbar_arrived[id]) {
      fprintf(stderr,
              "kiln GPU emulator: kernel '%s', block (%d,%d,%d) ends with %d "
              "of %d threads arrived at named barrier %d\n",
              name, px, py, pz, s->nbar_arrived[id], s->nbar_count[id], id);
      abort();
    }
  /* Every TMA copy's completion must have been waited for: the GPU may
   * still be writing the shared memory of a block that did not. */
  for (int k = 0; k < s->num_mbars; ++k) {
    mbarrier *m = &s->mbars[k];
    uint64_t seen = 0;
    for (int t = 0; t < num_threads; ++t)
      if (s->mb_seen[t][k] > seen)
        seen = s->mb_seen[t][k];
    if (m->tma_phase && seen < m->tma_phase) {
      fprintf(stderr,
              "kiln GPU emulator: kernel '%s', block (%d,%d,%d) ends with "
              "TMA copies in flight: no thread waited for phase %llu of the "
              "mbarrier at shared byte %lld, which completes %s\n",
              name, px, py, pz, (unsigned long long)(m->tma_phase - 1),
              (long long)m->off, m->tma_site);
      abort();
    }
  }
}

EMU_API int32_t kiln_emu_thread_id(void) { return S->current; }

/* %clock64: the host's monotonic clock in nanoseconds (non-decreasing within
 * a thread, as the SM's cycle counter is; the emulator's threads are fibers
 * of one host thread, so readings of one block are ordered as it ran them). */
EMU_API int64_t kiln_emu_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* %smid: the core the host thread runs the block on (0 if unknown). */
EMU_API int32_t kiln_emu_smid(void) {
  int cpu = sched_getcpu();
  return cpu < 0 ? 0 : cpu;
}

EMU_API int64_t kiln_emu_shared(void) {
  return (int64_t)(uintptr_t)state()->smem;
}

EMU_API void kiln_emu_barrier(void) {
  block_state *s = S;
  uint64_t gen = s->bar_gen;
  fiber *self = &s->fibers[s->current];
  if (self->bulk_uncommitted || self->bulk_groups)
    fail("reaches a barrier with TMA stores in flight: they may still read "
         "shared memory that other threads write next (no "
         "cp.async.bulk.wait_group before it)");
  s->progress++;
  if (++s->bar_arrived == s->num_threads) {
    s->bar_arrived = 0;
    /* wgmma groups retired before the barrier no longer read shared memory,
     * for every thread past it (wgmma_write_check). */
    for (int w = 0; w < s->num_threads / 128; ++w) {
      uint32_t safe = UINT32_MAX;
      for (int t = 128 * w; t < 128 * (w + 1); ++t) {
        fiber *g = &s->fibers[t];
        uint32_t retired = g->wg_committed - (uint32_t)g->wg_groups;
        if (retired < safe)
          safe = retired;
      }
      s->wg_safe[w] = safe;
    }
    s->bar_gen++;
    s->epoch++;
    return;
  }
  s->fibers[s->current].waiting = 1;
  while (s->bar_gen == gen)
    yield();
  s->fibers[s->current].waiting = 0;
}

/* bar.sync id, count (wait != 0) and bar.arrive id, count: `count` threads
 * complete a phase of named barrier `id`, those that sync waiting for it.
 * Named barriers order execution only: the race checker's epochs advance at
 * block barriers alone, so no shared-memory access is taken as ordered by
 * one (the compiler uses them to order wgmma issue, GPUPingpong.cpp). */
EMU_API void kiln_emu_named_barrier(int32_t id, int32_t count, int32_t wait) {
  block_state *s = S;
  if (id < 1 || id > 15)
    fail("named barrier %d (ids 1-15; 0 is the block barrier)", id);
  if (count <= 0 || count % kWarp || count > s->num_threads)
    fail("named barrier %d with a count of %d threads (a multiple of %d, at "
         "most the block's %d)",
         id, count, kWarp, s->num_threads);
  if (s->nbar_arrived[id] == 0)
    s->nbar_count[id] = count;
  else if (s->nbar_count[id] != count)
    fail("named barrier %d: a count of %d threads in a phase that expects %d",
         id, count, s->nbar_count[id]);
  uint64_t gen = s->nbar_gen[id];
  s->progress++;
  if (++s->nbar_arrived[id] == count) {
    s->nbar_arrived[id] = 0;
    s->nbar_gen[id]++;
    return;
  }
  if (!wait)
    return;
  fiber *self = &s->fibers[s->current];
  self->waiting = 4;
  self->wait_bar = id;
  while (s->nbar_gen[id] == gen)
    yield();
  self->waiting = 0;
}

/* `size` threads meet here: the calling thread's warp or warpgroup, whose
 * generation counter and arrival count are *gen and *arrived. */
static void group_sync(uint64_t *gen, int *arrived, int size) {
  block_state *s = S;
  uint64_t g = *gen;
  s->progress++;
  if (++*arrived == size) {
    *arrived = 0;
    ++*gen;
    return;
  }
  s->fibers[s->current].waiting = 2;
  while (*gen == g)
    yield();
  s->fibers[s->current].waiting = 0;
}

/* All 32 lanes of the calling thread's warp meet here. */
static void warp_sync(void) {
  int w = S->current / kWarp;
  group_sync(&S->warp_gen[w], &S->warp_arrived[w], kWarp);
}

static uint64_t shfl_xor(uint64_t v, int32_t offset, int32_t width) {
  block_state *s = S;
  int w = s->current / kWarp, lane = s->current % kWarp;
  if (width < 1 || width > kWarp || (width & (width - 1)) || offset < 0)
    fail("shuffle with width %d, offset %d", width, offset);
  s->shfl[w][lane] = v;
  warp_sync();
  int src = lane ^ offset;
  int seg = ~(width - 1) & (kWarp - 1);
  uint64_t r = (src < kWarp && (src & seg) == (lane & seg)) ? s->shfl[w][src]
                                                            : v;
  warp_sync();
  return r;
}

EMU_API int32_t kiln_emu_shfl_xor_b32(int32_t v, int32_t offset,
                                      int32_t width) {
  return (int32_t)(uint32_t)shfl_xor((uint32_t)v, offset, width);
}

EMU_API int64_t kiln_emu_shfl_xor_b64(int64_t v, int32_t offset,
                                      int32_t width) {
  return (int64_t)shfl_xor((uint64_t)v, offset, width);
}

/* Whether shared byte i (shadow h) belongs to one of the block's mbarriers. */
static int mbarrier_byte(const shadow *h, int64_t i) {
  block_state *s = S;
  int k = h->mbar - 1;
  return k >= 0 && k < s->num_mbars && s->mbars[k].off <= i &&
         i < s->mbars[k].off + 8;
}

/* Whether the last write of a byte was a TMA copy of this block; if so,
 * whether the current thread has waited for the phase that completes it. */
static int tma_byte(const shadow *h) {
  return h->tma_bar && h->w_epoch >= S->block_epoch;
}

static int tma_observed(const shadow *h) {
  return S->mb_seen[S->current][h->tma_bar - 1] > h->tma_phase;
}

/* A write of shared byte `i` (shadow `h`) by the current thread: no
 * wgmma.mma_async that read it may still be in flight. It is known not to
 * be when its group was retired (wgmma.wait_group) by every thread of its
 * warpgroup before the last barrier. (A thread's own wait_group promises
 * only its own view of the groups, so even a thread of the warpgroup needs
 * that barrier.) */
static void wgmma_write_check(const shadow *h, int64_t i, const char *site) {
  block_state *s = S;
  if (h->wg_block != s->block_epoch)
    return;
  for (int w = 0; w < s->num_threads / 128; ++w) {
    uint32_t g = h->wg_group[w];
    if (!g || s->wg_safe[w] >= g)
      continue;
    fail("%s: writes shared byte %lld, which a wgmma.mma_async of warpgroup "
         "%d (its group %u) may still read: no wgmma.wait_group of every "
         "thread of that warpgroup retired it before a barrier",
         site, (long long)i, w, g);
  }
}

EMU_API void kiln_emu_shared_access(int64_t addr, int32_t bytes,
                                    int32_t is_write, const char *site) {
  block_state *s = S;
  int64_t off = addr - (int64_t)(uintptr_t)s->smem;
  if (off < 0 || bytes < 1 || off + bytes > s->shared_bytes)
    fail("%s: shared-memory %s of %d bytes at byte %lld is outside the "
         "kernel's %lld bytes",
         site, is_write ? "store" : "load", bytes, (long long)off,
         (long long)s->shared_bytes);
  int32_t t = s->current;
  for (int64_t i = off; i < off + bytes; ++i) {
    shadow *h = &s->shadow[i];
    int wrote_here = h->w_epoch == s->epoch;
    int read_here = h->r_epoch == s->epoch;
    /* A cp.async lands when its thread's wait_group retires it: until then
     * no thread may touch its bytes, barriers or not. */
    if (h->cp_block == s->block_epoch && h->cp_pending > 0)
      fail("%s: shared-memory %s of byte %lld while a cp.async to it (%s) is "
           "in flight: no cp.async.wait_group of its thread has retired it",
           site, is_write ? "store" : "load", (long long)i, h->cp_site);
    if (h->mbar && mbarrier_byte(h, i))
      fail("%s: shared-memory %s touches byte %lld of the mbarrier at "
           "shared byte %lld (only mbarrier operations may access it)",
           site, is_write ? "store" : "load", (long long)i,
           (long long)s->mbars[h->mbar - 1].off);
    /* A TMA copy's bytes are this thread's to access once it has waited
     * for their mbarrier phase, which orders them (no barrier needed). */
    if (tma_byte(h)) {
      if (!tma_observed(h))
        fail("%s: %s bytes of a TMA copy (%s) before waiting on its "
             "mbarrier: shared byte %lld, completed by phase %llu of the "
             "mbarrier at shared byte %lld, which this thread has not "
             "waited for",
             site, is_write ? "writes" : "reads", h->w_site, (long long)i,
             (unsigned long long)h->tma_phase,
             (long long)s->mbars[h->tma_bar - 1].off);
      wrote_here = 0;
    }
    if (wrote_here && h->w_tid != t)
      fail("data race on shared byte %lld: %s here (%s), and thread %d "
           "wrote it since the last barrier (%s)",
           (long long)i, is_write ? "written" : "read", site, h->w_tid,
           h->w_site);
    if (is_write) {
      wgmma_write_check(h, i, site);
      if (read_here && h->r_tid != t)
        fail("data race on shared byte %lld: written here (%s), and %s "
             "read it since the last barrier (%s)",
             (long long)i, site,
             h->r_tid == -2 ? "several threads" : "another thread",
             h->r_site);
      h->w_epoch = s->epoch;
      h->w_tid = t;
      h->w_site = site;
      h->w_proxy = s->fibers[t].proxy_fences;
      h->tma_bar = 0;
    } else if (!read_here) {
      h->r_epoch = s->epoch;
      h->r_tid = t;
      h->r_site = site;
    } else if (h->r_tid != t) {
      h->r_tid = -2;
    }
  }
}

EMU_API void kiln_emu_cp_async(int64_t dst, int64_t src, int64_t bytes,
                               int64_t src_bytes, const char *site) {
  block_state *s = S;
  fiber *f = &s->fibers[s->current];
  int64_t off = dst - (int64_t)(uintptr_t)s->smem;
  if (off < 0 || off + bytes > s->shared_bytes)
    fail("%s: cp.async to shared byte %lld is outside the kernel's %lld "
         "bytes",
         site, (long long)off, (long long)s->shared_bytes);
  if (bytes != 4 && bytes != 8 && bytes != 16)
    fail("%s: cp.async of %lld bytes (PTX allows 4, 8 or 16)", site,
         (long long)bytes);
  if ((dst | src) % bytes)
    fail("%s: cp.async addresses not aligned to %lld bytes (source %llx, "
         "destination %llx)",
         site, (long long)bytes, (unsigned long long)src,
         (unsigned long long)dst);
  /* The copy may land any time until its wait_group: it is a write of this
   * thread from now on (a race with another thread's access since the last
   * barrier), and lands again, visibly, when retired. */
  kiln_emu_shared_access(dst, (int32_t)bytes, 1, site);
  for (int64_t i = off; i < off + bytes; ++i) {
    shadow *h = &s->shadow[i];
    if (h->cp_block != s->block_epoch) {
      h->cp_block = s->block_epoch;
      h->cp_pending = 0;
    }
    h->cp_pending++;
    h->cp_site = site;
  }
  if (f->num_copies == f->cap_copies) {
    size_t cap = f->cap_copies ? 2 * f->cap_copies : 256;
    pending_copy *c =
        (pending_copy *)realloc(f->copies, cap * sizeof(pending_copy));
    if (!c) {
      fprintf(stderr, "kiln GPU emulator: out of memory\n");
      abort();
    }
    f->copies = c;
    f->cap_copies = cap;
  }
  pending_copy *c = &f->copies[f->num_copies++];
  c->dst = (uint64_t)dst;
  c->src = (uint64_t)src;
  c->bytes = (uint64_t)bytes;
  c->src_bytes = (uint64_t)(src_bytes < 0 ? 0 : src_bytes);
  c->group = UINT64_MAX;
  c->site = site;
}

EMU_API void kiln_emu_cp_async_commit(void) {
  fiber *f = &S->fibers[S->current];
  for (size_t i = 0; i < f->num_copies; ++i)
    if (f->copies[i].bytes && f->copies[i].group == UINT64_MAX)
      f->copies[i].group = f->next_group;
  f->next_group++;
}

/* Retires every committed group but the `n` most recent ones: their copies
 * land now (zero-filled past src_bytes), as writes of this thread. */
EMU_API void kiln_emu_cp_async_wait(int32_t n) {
  block_state *s = S;
  fiber *f = &s->fibers[s->current];
  uint64_t keep_from = f->next_group > (uint64_t)n ? f->next_group - n : 0;
  size_t live = 0;
  for (size_t i = 0; i < f->num_copies; ++i) {
    pending_copy c = f->copies[i];
    if (c.bytes && c.group != UINT64_MAX && c.group < keep_from) {
      unsigned char *dst = (unsigned char *)(uintptr_t)c.dst;
      int64_t off = (int64_t)c.dst - (int64_t)(uintptr_t)s->smem;
      for (int64_t b = off; b < off + (int64_t)c.bytes; ++b)
        s->shadow[b].cp_pending--;
      kiln_emu_shared_access((int64_t)c.dst, (int32_t)c.bytes, 1, c.site);
      uint64_t m = c.src_bytes < c.bytes ? c.src_bytes : c.bytes;
      memcpy(dst, (const void *)(uintptr_t)c.src, m);
      memset(dst + m, 0, c.bytes - m);
      continue;
    }
    f->copies[live++] = c;
  }
  f->num_copies = live;
}

static uint16_t read_u16(int64_t addr, const char *site) {
  kiln_emu_shared_access(addr, 2, 0, site);
  uint16_t v;
  memcpy(&v, (const void *)(uintptr_t)addr, 2);
  return v;
}

/* The shared-memory wavefronts one 8x8 matrix of an ldmatrix takes: its
 * eight 16-byte rows are 32 words; a bank (word address % 32) serves one
 * distinct word per wavefront (the same word read twice is one). */
static int ldmatrix_wavefronts(const int64_t *rows) {
  int64_t words[32];
  int n = 0, most = 0;
  for (int r = 0; r < 8; ++r)
    for (int w = 0; w < 4; ++w) {
      int64_t word = rows[r] / 4 + w;
      int seen = 0;
      for (int i = 0; i < n && !seen; ++i)
        seen = words[i] == word;
      if (!seen)
        words[n++] = word;
    }
  for (int bank = 0; bank < 32; ++bank) {
    int k = 0;
    for (int i = 0; i < n; ++i)
      k += (int)(((words[i] % 32) + 32) % 32) == bank;
    if (k > most)
      most = k;
  }
  return most;
}

/* KILN_EMU_BANK_CONFLICTS=report: each site once per process, with the
 * most wavefronts seen when first reported and the pitch of its rows. */
static void report_bank_conflict(const char *site, int k, int64_t pitch) {
  static const char *seen[256];
  static int num_seen;
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&lock);
  int known = 0;
  for (int i = 0; i < num_seen && !known; ++i)
    known = seen[i] == site;
  if (!known) {
    if (num_seen < 256)
      seen[num_seen++] = site;
    fprintf(stderr,
            "kiln GPU emulator: %s: ldmatrix bank conflict, %d wavefronts "
            "per matrix (rows %lld bytes apart)\n",
            site, k, (long long)pitch);
  }
  pthread_mutex_unlock(&lock);
}

/* ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 per the PTX ISA:
 * lane l names the address of row (l % 8) of matrix l / 8 (16 bytes, 16-byte
 * aligned); register i of lane t holds row t / 4, columns 2 (t % 4) and
 * 2 (t % 4) + 1 of matrix i (lower column in the low half), or with .trans
 * rows 2 (t % 4) and 2 (t % 4) + 1 of column t / 4. */
EMU_API void kiln_emu_ldmatrix(int64_t addr, int32_t n, int32_t trans,
                               int64_t out, const char *site) {
  block_state *s = S;
  int w = s->current / kWarp, lane = s->current % kWarp;
  if (n != 1 && n != 2 && n != 4)
    fail("%s: ldmatrix of %d matrices (PTX allows 1, 2 or 4)", site, n);
  if (lane < 8 * n && addr % 16)
    fail("%s: ldmatrix row address %llx is not 16-byte aligned", site,
         (unsigned long long)addr);
  s->ldm_addr[w][lane] = addr;
  warp_sync();
  if (s->bank_check && lane == 0)
    for (int i = 0; i < n; ++i) {
      int k = ldmatrix_wavefronts(&s->ldm_addr[w][8 * i]);
      if (k <= 1)
        continue;
      if (s->bank_check == 1)
        fail("%s: ldmatrix bank conflict: matrix %d of warp %d takes %d "
             "wavefronts (rows at %llx, %llx, ...; "
             "KILN_EMU_BANK_CONFLICTS=fail)",
             site, i, w, k, (unsigned long long)s->ldm_addr[w][8 * i],
             (unsigned long long)s->ldm_addr[w][8 * i + 1]);
      report_bank_conflict(site, k, s->ldm_addr[w][8 * i + 1] -
                                        s->ldm_addr[w][8 * i]);
    }
  uint32_t r[4];
  for (int i = 0; i < n; ++i) {
    int64_t *rows = &s->ldm_addr[w][8 * i];
    uint32_t lo, hi;
    if (!trans) {
      int64_t base = rows[lane / 4] + 4 * (lane % 4);
      lo = read_u16(base, site);
      hi = read_u16(base + 2, site);
    } else {
      lo = read_u16(rows[2 * (lane % 4)] + 2 * (lane / 4), site);
      hi = read_u16(rows[2 * (lane % 4) + 1] + 2 * (lane / 4), site);
    }
    r[i] = lo | hi << 16;
  }
  warp_sync();
  memcpy((void *)(uintptr_t)out, r, 4 * (size_t)n);
}

static float bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static float f16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F,
           man = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);
  } else if (exp == 0) {
    float f = (float)man * (1.0f / 16777216.0f); /* man * 2^-24 */
    return sign ? -f : f;
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: D = A*B+C
 * with A 16x16 (row), B 16x8 (col), C/D 16x8 f32, fragments per the PTX ISA
 * ("Matrix Fragments for mma.m16n8k16 with floating point type"):
 *   groupID = lane / 4, tig = lane % 4;
 *   A reg r holds rows groupID (+8 when r is odd), columns 2*tig, 2*tig+1
 *     (+8 when r >= 2), the lower column in the low half;
 *   B reg r holds rows 2*tig, 2*tig+1 (+8 when r == 1), column groupID;
 *   C/D element i: row groupID (+8 when i >= 2), column 2*tig + (i & 1). */
/* An mma.sync's operands: this lane's fragment registers published to its
 * warp, which then meets (each lane reads the others' from s->mma_a / mma_b). */
static void mma_share(int w, int lane, int32_t a0, int32_t a1, int32_t a2,
                      int32_t a3, int32_t b0, int32_t b1) {
  block_state *s = S;
  s->mma_a[w][lane][0] = (uint32_t)a0;
  s->mma_a[w][lane][1] = (uint32_t)a1;
  s->mma_a[w][lane][2] = (uint32_t)a2;
  s->mma_a[w][lane][3] = (uint32_t)a3;
  s->mma_b[w][lane][0] = (uint32_t)b0;
  s->mma_b[w][lane][1] = (uint32_t)b1;
  warp_sync();
}

EMU_API void kiln_emu_mma_m16n8k16(int32_t is_f16, int32_t a0, int32_t a1,
                                   int32_t a2, int32_t a3, int32_t b0,
                                   int32_t b1, float c0, float c1, float c2,
                                   float c3, int64_t out) {
  block_state *s = S;
  int w = s->current / kWarp, lane = s->current % kWarp;
  mma_share(w, lane, a0, a1, a2, a3, b0, b1);
  float (*cvt)(uint16_t) = is_f16 ? f16_to_float : bf16_to_float;
  float c[4] = {c0, c1, c2, c3}, d[4];
  int group = lane / 4, tig = lane % 4;
  for (int i = 0; i < 4; ++i) {
    int row = group + (i >= 2 ? 8 : 0), col = 2 * tig + (i & 1);
    float acc = c[i];
    for (int k = 0; k < 16; ++k) {
      int a_lane = (row % 8) * 4 + (k % 8) / 2;
      int a_reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
      uint32_t ar = s->mma_a[w][a_lane][a_reg];
      uint16_t a = (uint16_t)(k & 1 ? ar >> 16 : ar & 0xFFFF);
      int b_lane = col * 4 + (k % 8) / 2;
      uint32_t br = s->mma_b[w][b_lane][k >= 8 ? 1 : 0];
      uint16_t bv = (uint16_t)(k & 1 ? br >> 16 : br & 0xFFFF);
      acc += cvt(a) * cvt(bv);
    }
    d[i] = acc;
  }
  warp_sync();
  memcpy((void *)(uintptr_t)out, d, sizeof d);
}

/* mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 (no .satfinite: sums
 * wrap modulo 2^32). Fragments per the PTX ISA, four s8 per register, the
 * lowest k in the low byte:
 *   A reg r holds row groupID (+8 when r is odd), columns 4*tig .. 4*tig+3
 *     (+16 when r >= 2);
 *   B reg r holds rows 4*tig .. 4*tig+3 (+16 when r == 1), column groupID;
 *   C/D element i as m16n8k16's. The results go to `out` as their bits. */
EMU_API void kiln_emu_mma_m16n8k32_s8(int32_t a0, int32_t a1, int32_t a2,
                                      int32_t a3, int32_t b0, int32_t b1,
                                      int32_t c0, int32_t c1, int32_t c2,
                                      int32_t c3, int64_t out) {
  block_state *s = S;
  int w = s->current / kWarp, lane = s->current % kWarp;
  mma_share(w, lane, a0, a1, a2, a3, b0, b1);
  uint32_t c[4] = {(uint32_t)c0, (uint32_t)c1, (uint32_t)c2, (uint32_t)c3};
  uint32_t d[4];
  int group = lane / 4, tig = lane % 4;
  for (int i = 0; i < 4; ++i) {
    int row = group + (i >= 2 ? 8 : 0), col = 2 * tig + (i & 1);
    uint32_t acc = c[i];
    for (int k = 0; k < 32; ++k) {
      int a_lane = (row % 8) * 4 + (k % 16) / 4;
      int a_reg = (row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0);
      int8_t a = (int8_t)(s->mma_a[w][a_lane][a_reg] >> (8 * (k % 4)));
      int b_lane = col * 4 + (k % 16) / 4;
      int8_t bv = (int8_t)(s->mma_b[w][b_lane][k >= 16 ? 1 : 0] >> (8 * (k % 4)));
      acc += (uint32_t)((int32_t)a * (int32_t)bv);
    }
    d[i] = acc;
  }
  warp_sync();
  memcpy((void *)(uintptr_t)out, d, sizeof d);
}

/* The 128 threads of the calling thread's warpgroup meet here. */
static void warpgroup_sync(void) {
  int g = S->current / 128;
  group_sync(&S->wg_gen[g], &S->wg_arrived[g], 128);
}

EMU_API void kiln_emu_fence_proxy_async(void) {
  S->fibers[S->current].proxy_fences++;
}

/* Whether byte `h`'s last write in this block is a generic one its writer
 * has not yet fenced for the async proxy (fence.proxy.async after it): the
 * async proxy (wgmma, a TMA store) may not read it. TMA writes are the async
 * proxy's own. */
static int unfenced_for_async(const shadow *h) {
  block_state *s = S;
  return h->w_epoch && h->w_epoch >= s->block_epoch && !tma_byte(h) &&
         s->fibers[h->w_tid].proxy_fences <= h->w_proxy;
}

/* A 16-bit operand element read by wgmma (the async proxy): besides the
 * generic checks, its last writer (in this block) must have issued a
 * fence.proxy.async since writing it, unless that write was a TMA copy (the
 * async proxy itself). */
static uint16_t wgmma_read(int64_t addr, const char *site) {
  block_state *s = S;
  uint16_t v = read_u16(addr, site);
  int64_t off = addr - (int64_t)(uintptr_t)s->smem;
  const fiber *f = &s->fibers[s->current];
  for (int64_t i = off; i < off + 2; ++i) {
    shadow *h = &s->shadow[i];
    /* This read lasts until its group is retired (wgmma_write_check). */
    if (h->wg_block != s->block_epoch) {
      memset(h->wg_group, 0, sizeof h->wg_group);
      h->wg_block = s->block_epoch;
    }
    h->wg_group[s->current / 128] = f->wg_committed + 1;
    if (unfenced_for_async(h))
      fail("%s: wgmma reads shared byte %lld, which thread %d wrote (%s) "
           "without a fence.proxy.async after it",
           site, (long long)i, h->w_tid, h->w_site);
  }
  return v;
}

EMU_API void kiln_emu_wgmma_fence(void) {
  S->fibers[S->current].wg_fenced = 1;
}

EMU_API void kiln_emu_wgmma_commit(void) {
  fiber *f = &S->fibers[S->current];
  f->wg_groups++;
  f->wg_committed++;
  f->wg_uncommitted = 0;
}

/* Retires every committed group but the `n` most recent ones. Their
 * results were computed at issue; what this checks is the protocol. The
 * accumulators are then handed back to other instructions: the next
 * wgmma.mma_async needs a wgmma.fence first. */
EMU_API void kiln_emu_wgmma_wait(int32_t n) {
  fiber *f = &S->fibers[S->current];
  if (n < 0)
    fail("wgmma.wait_group %d", n);
  if (f->wg_groups > n)
    f->wg_groups = n;
  f->wg_fenced = 0;
}

/* The 128B swizzle of a shared-memory byte offset (of the 256 KiB-aligned
 * window, so address bits): bits 4-6 (the 16-byte chunk of a 128-byte
 * line) XOR bits 7-9 (the line, mod 8). */
static int64_t swizzle128(int64_t off) { return off ^ (((off >> 7) & 7) << 4); }

/* The element (row, k) of an operand in shared memory under a no-swizzle
 * (or, below, 128B-swizzle) matrix descriptor, per the PTX ISA ("Shared Memory Matrix Layout",
 * canonical layouts, with T = 8 16-bit elements per 16 bytes):
 *   K-major:  ((8,m),(T,2k)):((1T,SBO),(1,LBO)): core matrices of 8 rows of
 *             16 bytes (8 consecutive k), row groups SBO apart, k groups LBO;
 *   MN-major: ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)): core matrices of 8 k-rows
 *             of 16 bytes (8 consecutive rows), row groups SBO apart, k
 *             groups LBO.
 * `row` is the M index of A or the N index of B. */
static int64_t wgmma_element(uint64_t desc, int row, int k, int mn_major) {
  block_state *s = S;
  int64_t start = (int64_t)((desc & 0x3FFF) << 4);
  int64_t lbo = (int64_t)(((desc >> 16) & 0x3FFF) << 4);
  int64_t sbo = (int64_t)(((desc >> 32) & 0x3FFF) << 4);
  int64_t off;
  if (desc >> 62 == 1) {
    /* 128B swizzle (CuTe, as the ISA gives it, T = 8 16-bit elements):
     *   K-major:  Swizzle<3,4,3> o ((8,m),(T,2k)):((8T,SBO),(1,T)): rows of
     *             128 bytes, 8-row groups SBO apart, 16 consecutive k per
     *             row (the start address selects them; LBO unused);
     *   MN-major: Swizzle<3,4,3> o ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)):
     *             k-rows of 64 MN elements (128 bytes), 8-k groups SBO
     *             apart, 64-element MN blocks LBO apart. */
    off = mn_major ? start + (row % 64) * 2 + (row / 64) * lbo +
                         (k % 8) * 128 + (k / 8) * sbo
                   : start + (row % 8) * 128 + (row / 8) * sbo + k * 2;
    off = swizzle128(off);
  } else {
    off = start + (row / 8) * sbo + (k / 8) * lbo +
          (mn_major ? (k % 8) * 16 + (row % 8) * 2
                    : (row % 8) * 16 + (k % 8) * 2);
  }
  return (int64_t)(uintptr_t)s->smem + off;
}

/* wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16} with A and
 * B from shared memory (descriptors), D += A * B (D = A * B without
 * scale-d). Accumulator fragment per the PTX ISA ("Matrix Fragments for
 * wgmma.mma_async.m64nNk16", accumulator D): warp w of the warpgroup holds
 * rows 16 w to 16 w + 15; its element i (of N / 2) is at row
 * 16 w + lane / 4 + 8 ((i % 4) / 2), column 2 (lane % 4) + (i % 2) + 8 (i / 4).
 * All 128 threads must issue it with the same descriptors. */
/* What every wgmma.mma_async issue must satisfy: whole warpgroups, a valid
 * N, a wgmma.fence since the accumulators were last touched. */
static void wgmma_check_issue(int32_t n, const char *site) {
  block_state *s = S;
  if (s->num_threads % 128)
    fail("%s: wgmma in a block of %d threads (not whole warpgroups)", site,
         s->num_threads);
  if (n < 8 || n > 256 || n % 8)
    fail("%s: wgmma with N = %d (PTX allows multiples of 8 up to 256)", site,
         n);
  if (!s->fibers[s->current].wg_fenced)
    fail("%s: wgmma.mma_async without a wgmma.fence since its registers "
         "were last accessed",
         site);
}

/* A shared-memory operand's descriptor: no swizzle, non-zero offsets. */
static void wgmma_check_descriptor(uint64_t d, const char *site) {
  if (d >> 62 > 1)
    fail("%s: wgmma descriptor %llx uses the 64B or 32B swizzle mode (the "
         "emulator knows no swizzle and 128B)",
         site, (unsigned long long)d);
  if (d >> 49 & 7)
    fail("%s: wgmma descriptor %llx has a nonzero matrix base offset (the "
         "emulator takes 1024-byte aligned swizzle patterns)",
         site, (unsigned long long)d);
  if ((d >> 16 & 0x3FFF) == 0 || (d >> 32 & 0x3FFF) == 0)
    fail("%s: wgmma descriptor %llx has a zero leading or stride byte "
         "offset",
         site, (unsigned long long)d);
}

/* This thread's accumulators of a warpgroup's m64nNk16 (PTX ISA, "Matrix
 * Fragments for wgmma.mma_async.m64nNk16", accumulator D): warp w of the
 * warpgroup holds rows 16 w to 16 w + 15; its element i (of N / 2) is at
 * row 16 w + lane / 4 + 8 ((i % 4) / 2), column 2 (lane % 4) + (i % 2) +
 * 8 (i / 4). A comes from shared memory through `desc_a`, or with desc_a 0
 * from the warpgroup's registers (wg_areg, "Register Fragment of Matrix A":
 * lane 4 g + q of warp w, register r, holds row 16 w + g + 8 (r % 2),
 * k 2 q + 8 (r / 2) and the next k in the high half). */
/* An fp8 byte's value: e4m3 (OCP E4M3FN: bias 7, no infinities,
 * S.1111.111 NaN) or e5m2 (a float16's top byte). */
static float fp8_to_float(uint8_t v, int e5m2) {
  if (e5m2)
    return f16_to_float((uint16_t)(v << 8));
  uint32_t sign = (uint32_t)(v >> 7) << 31, exp = (v >> 3) & 15, man = v & 7,
           bits;
  if (exp == 15 && man == 7) {
    bits = sign | 0x7FC00000u;
  } else if (exp == 0) {
    float f = (float)man * (1.0f / 512.0f); /* man * 2^-9 */
    return sign ? -f : f;
  } else {
    bits = sign | ((exp + 120) << 23) | (man << 20); /* 2^(exp - 7) 1.man */
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Operand element types of wgmma_accumulate's `types`: A in bits 0-3, B in
 * bits 4-7. */
enum { kWgBF16 = 0, kWgF16 = 1, kWgE4M3 = 2, kWgE5M2 = 3, kWgS8 = 4 };

/* Element (row, k) of a wgmma operand in shared memory: 16-bit elements,
 * or fp8 bytes (K-major only: the byte k % 2 of the 16-bit element k / 2 of
 * the same rows, as their core matrices are 8 rows of 16 bytes too). */
static float wgmma_value(uint64_t desc, int row, int k, int trans, int type,
                         const char *site) {
  if (type == kWgE4M3 || type == kWgE5M2) {
    uint16_t pair = wgmma_read(wgmma_element(desc, row, k / 2, trans), site);
    return fp8_to_float((uint8_t)(k & 1 ? pair >> 8 : pair & 0xFF),
                        type == kWgE5M2);
  }
  uint16_t h = wgmma_read(wgmma_element(desc, row, k, trans), site);
  return type == kWgF16 ? f16_to_float(h) : bf16_to_float(h);
}

static void wgmma_accumulate(uint64_t desc_a, int trans_a, uint64_t desc_b,
                             int trans_b, int n, int types, int scale_d,
                             float *d, const char *site) {
  block_state *s = S;
  int t = s->current, first = t / 128 * 128;
  int type_a = types & 15, type_b = (types >> 4) & 15;
  float (*cvt)(uint16_t) = type_a == kWgF16 ? f16_to_float : bf16_to_float;
  /* k16 for 16-bit elements, k32 for fp8 and s8 (both 32 bytes of each
   * row). */
  int depth = type_a >= kWgE4M3 ? 32 : 16;
  int w = (t % 128) / kWarp, lane = t % kWarp;
  for (int i = 0; i < n / 2; ++i) {
    int row = 16 * w + lane / 4 + 8 * ((i % 4) / 2);
    int col = 2 * (lane % 4) + (i % 2) + 8 * (i / 4);
    int rr = row % 16;
    if (type_a == kWgS8) {
      /* .s32.s8.s8: exact products, sums wrapping modulo 2^32 (no
       * .satfinite); the accumulators are s32 registers, passed in d's
       * bits. */
      uint32_t sum = 0;
      if (scale_d)
        memcpy(&sum, &d[i], 4);
      for (int k = 0; k < 32; ++k) {
        uint16_t pa = wgmma_read(wgmma_element(desc_a, row, k / 2, trans_a), site);
        uint16_t pb = wgmma_read(wgmma_element(desc_b, col, k / 2, trans_b), site);
        int8_t x = (int8_t)(k & 1 ? pa >> 8 : pa & 0xFF);
        int8_t y = (int8_t)(k & 1 ? pb >> 8 : pb & 0xFF);
        sum += (uint32_t)((int32_t)x * (int32_t)y);
      }
      memcpy(&d[i], &sum, 4);
      continue;
    }
    float sum = scale_d ? d[i] : 0.0f;
    for (int k = 0; k < depth; ++k) {
      if (depth == 32) {
        sum += wgmma_value(desc_a, row, k, trans_a, type_a, site) *
               wgmma_value(desc_b, col, k, trans_b, type_b, site);
        continue;
      }
      uint16_t a;
      if (desc_a) {
        a = wgmma_read(wgmma_element(desc_a, row, k, trans_a), site);
      } else {
        int a_thread = first + 32 * (row / 16) + 4 * (rr % 8) + (k % 8) / 2;
        uint32_t ar =
            s->wg_areg[a_thread][(rr >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
        a = (uint16_t)(k & 1 ? ar >> 16 : ar & 0xFFFF);
      }
      sum += cvt(a) * wgmma_value(desc_b, col, k, trans_b, type_b, site);
    }
    d[i] = sum;
  }
}

EMU_API void kiln_emu_wgmma(int64_t desc_a, int64_t desc_b, int32_t n,
                            int32_t types, int32_t trans_a, int32_t trans_b,
                            int32_t scale_d, int64_t acc, const char *site) {
  block_state *s = S;
  fiber *f = &s->fibers[s->current];
  int t = s->current;
  wgmma_check_issue(n, site);
  wgmma_check_descriptor((uint64_t)desc_a, site);
  wgmma_check_descriptor((uint64_t)desc_b, site);
  s->wg_desc[t][0] = (uint64_t)desc_a;
  s->wg_desc[t][1] = (uint64_t)desc_b;
  warpgroup_sync();
  int first = t / 128 * 128;
  for (int u = first; u < first + 128; ++u)
    if (s->wg_desc[u][0] != s->wg_desc[t][0] ||
        s->wg_desc[u][1] != s->wg_desc[t][1])
      fail("%s: wgmma descriptors differ across the warpgroup (thread %d: "
           "%llx %llx, thread %d: %llx %llx)",
           site, t, (unsigned long long)s->wg_desc[t][0],
           (unsigned long long)s->wg_desc[t][1], u,
           (unsigned long long)s->wg_desc[u][0],
           (unsigned long long)s->wg_desc[u][1]);
  wgmma_accumulate((uint64_t)desc_a, trans_a, (uint64_t)desc_b, trans_b, n,
                   types, scale_d, (float *)(uintptr_t)acc, site);
  warpgroup_sync();
  f->wg_uncommitted++;
}

/* wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16} with A
 * in registers: four 32-bit registers per thread, two 16-bit elements each
 * (the lower k in the low half), laid out per warp as mma.m16n8k16's A (PTX
 * ISA, "Register Fragment of Matrix A" for wgmma .m64nNk16): warp w of the
 * warpgroup holds rows 16 w .. 16 w + 15; lane 4 g + q holds, in register
 * r, row g + 8 (r % 2), k 2 q + 8 (r / 2) + {0, 1}. B from shared memory
 * through its descriptor, as kiln_emu_wgmma. */
EMU_API void kiln_emu_wgmma_rs(int32_t a0, int32_t a1, int32_t a2, int32_t a3,
                               int64_t desc_b, int32_t n, int32_t is_f16,
                               int32_t trans_b, int32_t scale_d, int64_t acc,
                               const char *site) {
  block_state *s = S;
  fiber *f = &s->fibers[s->current];
  int t = s->current;
  wgmma_check_issue(n, site);
  uint64_t db = (uint64_t)desc_b;
  wgmma_check_descriptor(db, site);
  s->wg_desc[t][1] = db;
  s->wg_areg[t][0] = (uint32_t)a0;
  s->wg_areg[t][1] = (uint32_t)a1;
  s->wg_areg[t][2] = (uint32_t)a2;
  s->wg_areg[t][3] = (uint32_t)a3;
  warpgroup_sync();
  int first = t / 128 * 128;
  for (int u = first; u < first + 128; ++u)
    if (s->wg_desc[u][1] != db)
      fail("%s: wgmma B descriptors differ across the warpgroup (thread %d: "
           "%llx, thread %d: %llx)",
           site, t, (unsigned long long)db, u,
           (unsigned long long)s->wg_desc[u][1]);
  wgmma_accumulate(0, 0, db, trans_b, n, is_f16 ? kWgF16 | kWgF16 << 4 : 0,
                   scale_d, (float *)(uintptr_t)acc, site);
  warpgroup_sync();
  f->wg_uncommitted++;
}

/* mbarrier.init.shared::cta.b64 [bar], count: phase 0, `count` arrivals
 * pending, no transactions. An ordinary write of the thread (racing with
 * other threads' accesses since the last barrier); from then on its 8 bytes
 * belong to the mbarrier. */
EMU_API void kiln_emu_mbarrier_init(int64_t bar, int32_t count) {
  block_state *s = S;
  int64_t off = bar - (int64_t)(uintptr_t)s->smem;
  if (off < 0 || off + 8 > s->shared_bytes || off % 8)
    fail("mbarrier.init at address %llx: not an 8-byte aligned mbarrier "
         "inside the kernel's %lld bytes of shared memory",
         (unsigned long long)bar, (long long)s->shared_bytes);
  if (count < 1 || count > (1 << 20) - 1)
    fail("mbarrier.init at shared byte %lld with count %d (PTX allows 1 to "
         "2^20 - 1)",
         (long long)off, count);
  for (int k = 0; k < s->num_mbars; ++k)
    if (s->mbars[k].off == off)
      fail("mbarrier.init at shared byte %lld, which thread %d already "
           "initialized in this block (without mbarrier.inval)",
           (long long)off, s->mbars[k].init_tid);
  /* A slot mbarrier.inval freed (off -1), else a new one. */
  int k = 0;
  while (k < s->num_mbars && s->mbars[k].off != -1)
    ++k;
  if (k == kMaxMbarriers)
    fail("mbarrier.init at shared byte %lld: more than %d mbarriers in a "
         "block (an emulator limit)",
         (long long)off, kMaxMbarriers);
  kiln_emu_shared_access(bar, 8, 1, "mbarrier.init");
  int reused = k < s->num_mbars;
  if (!reused)
    s->num_mbars++;
  mbarrier *m = &s->mbars[k];
  /* A slot freed by mbarrier.inval keeps counting phases from where it was
   * (bytes its earlier TMA copies wrote, and what threads saw of them, stay
   * meaningful); the new mbarrier's parity starts at phase0. */
  uint64_t phase = reused ? m->phase : 0;
  memset(m, 0, sizeof *m);
  m->phase = m->phase0 = phase;
  m->off = off;
  m->count = m->pending = count;
  m->init_tid = s->current;
  m->init_epoch = s->epoch;
  m->init_proxy = s->fibers[s->current].proxy_fences;
  for (int64_t i = off; i < off + 8; ++i)
    s->shadow[i].mbar = k + 1;
  if (!reused)
    for (int t = 0; t < s->num_threads; ++t)
      s->mb_seen[t][k] = 0;
}

/* mbarrier.inval.shared::cta.b64 [bar]: the 8 bytes become ordinary
 * shared memory again (and the address may be initialized anew). Every TMA
 * completing on it must have been waited for. */
EMU_API void kiln_emu_mbarrier_inval(int64_t bar) {
  block_state *s = S;
  int64_t off = bar - (int64_t)(uintptr_t)s->smem;
  for (int k = 0; k < s->num_mbars; ++k) {
    mbarrier *m = &s->mbars[k];
    if (m->off != off)
      continue;
    uint64_t seen = 0;
    for (int t = 0; t < s->num_threads; ++t)
      if (s->mb_seen[t][k] > seen)
        seen = s->mb_seen[t][k];
    if (m->tx || (m->tma_phase && seen < m->tma_phase))
      fail("mbarrier.inval of the mbarrier at shared byte %lld with TMA "
           "copies in flight (%s)",
           (long long)off, m->tma_site ? m->tma_site : "?");
    for (int64_t i = off; i < off + 8; ++i)
      s->shadow[i].mbar = 0;
    m->off = -1;
    m->tma_phase = 0;
    memset(m->tma_issuers, 0, sizeof m->tma_issuers);
    return;
  }
  fail("mbarrier.inval at shared byte %lld, which is not an initialized "
       "mbarrier of this block",
       (long long)off);
}

/* The block's mbarrier at address `bar`, which `what` uses: initialised,
 * and visible to the calling thread (a barrier since another thread's
 * init). */
static mbarrier *mbarrier_at(int64_t bar, const char *what) {
  block_state *s = S;
  int64_t off = bar - (int64_t)(uintptr_t)s->smem;
  if (off < 0 || off + 8 > s->shared_bytes || off % 8)
    fail("%s on the mbarrier at address %llx: not an 8-byte aligned "
         "mbarrier inside the kernel's %lld bytes of shared memory",
         what, (unsigned long long)bar, (long long)s->shared_bytes);
  for (int k = 0; k < s->num_mbars; ++k) {
    mbarrier *m = &s->mbars[k];
    if (m->off != off)
      continue;
    if (m->init_tid != s->current && m->init_epoch == s->epoch)
      fail("%s on the mbarrier at shared byte %lld, which thread %d "
           "initialized with no barrier since (its init may not be "
           "visible)",
           what, (long long)off, m->init_tid);
    return m;
  }
  fail("%s on the mbarrier at shared byte %lld, which no thread of this "
       "block initialized (mbarrier.init)",
       what, (long long)off);
}

/* The current phase completes once all arrivals and transaction bytes are
 * in: the next one expects `count` arrivals again. */
static void mbarrier_advance(mbarrier *m) {
  if (m->pending || m->tx)
    return;
  m->phase++;
  m->pending = m->count;
  memset(m->tma_issuers, 0, sizeof m->tma_issuers);
  S->progress++;
}

static void mbarrier_add_tx(mbarrier *m, int64_t bytes, const char *what) {
  m->tx += bytes;
  if (m->tx > (1 << 20) - 1 || m->tx < -((1 << 20) - 1))
    fail("%s: the tx-count of the mbarrier at shared byte %lld leaves the "
         "PTX range (+-(2^20 - 1)): %lld",
         what, (long long)m->off, (long long)m->tx);
}

/* mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes */
EMU_API void kiln_emu_mbarrier_arrive_expect_tx(int64_t bar, int32_t bytes) {
  mbarrier *m = mbarrier_at(bar, "mbarrier.arrive.expect_tx");
  if (bytes < 0 || bytes > (1 << 20) - 1)
    fail("mbarrier.arrive.expect_tx of %d bytes (PTX allows 0 to 2^20 - 1)",
         bytes);
  if (m->pending == 0)
    fail("mbarrier.arrive.expect_tx on the mbarrier at shared byte %lld, "
         "whose phase %llu expects no more arrivals",
         (long long)m->off, (unsigned long long)m->phase);
  mbarrier_add_tx(m, bytes, "mbarrier.arrive.expect_tx");
  m->pending--;
  mbarrier_advance(m);
}

/* The loop on mbarrier.try_wait.parity.shared::cta.b64 [bar], parity: it
 * ends once the phase with that parity has completed, that is, once the
 * current phase's parity differs. The thread has then observed every phase
 * completed so far (their TMA bytes are its to access). */
EMU_API void kiln_emu_mbarrier_wait(int64_t bar, int32_t parity) {
  block_state *s = S;
  mbarrier *m = mbarrier_at(bar, "mbarrier.try_wait.parity");
  fiber *f = &s->fibers[s->current];
  if (parity != 0 && parity != 1)
    fail("mbarrier.try_wait.parity with parity %d", parity);
  if (((m->phase - m->phase0) & 1) == (uint64_t)parity) {
    f->waiting = 3;
    f->wait_bar = (int)(m - s->mbars);
    while (((m->phase - m->phase0) & 1) == (uint64_t)parity)
      yield();
    f->waiting = 0;
    s->progress++;
  }
  uint64_t *seen = &s->mb_seen[s->current][m - s->mbars];
  if (*seen < m->phase)
    *seen = m->phase;
}

static const char *const kTensorMapFields[] = {
    "global_address", "rank",           "box_dim",  "global_dim",
    "global_stride",  "element_stride", "elemtype", "interleave_layout",
    "swizzle_mode",   "fill_mode"};

static void check_tensor_map_address(int64_t map, const char *what) {
  if (!map || map % 64)
    fail("%s on the tensor map at %llx, which is not 64-byte aligned", what,
         (unsigned long long)map);
}

/* The protocol state of the tensor map at `map` (created if new). */
static tensormap_state *tensormap_at(int64_t map) {
  block_state *s = S;
  for (int i = 0; i < s->num_maps; ++i)
    if (s->maps[i].addr == map)
      return &s->maps[i];
  if (s->num_maps == kMaxTensorMaps)
    fail("more than %d tensor maps in a block (an emulator limit)",
         kMaxTensorMaps);
  int i = s->num_maps++;
  tensormap_state *e = &s->maps[i];
  memset(e, 0, sizeof *e);
  e->addr = map;
  e->writer = -1;
  for (int t = 0; t < s->num_threads; ++t)
    s->tm_acquired[t][i] = 0;
  return e;
}

static uint8_t saturate8(int64_t v) {
  return v < 0 || v > 0xFF ? 0xFF : (uint8_t)v;
}

static uint16_t saturate16(int64_t v) {
  return v < 0 || v > 0xFFFF ? 0xFFFF : (uint16_t)v;
}

/* tensormap.replace.tile.<field>.global.b1024 [map], (ord,) value. Values
 * are checked where the map is used (cp.async.bulk.tensor). */
EMU_API void kiln_emu_tensormap_replace(int64_t map, int32_t field, int32_t ord,
                                        int64_t value) {
  block_state *s = S;
  check_tensor_map_address(map, "tensormap.replace");
  if (field < 0 || field > 9)
    fail("tensormap.replace of field %d (0 to 9 name the fields)", field);
  int ords = field == 2 || field == 3 || field == 5 ? 5 : field == 4 ? 4 : 0;
  if (ords && (ord < 0 || ord >= ords))
    fail("tensormap.replace.%s with ordinal %d (PTX allows 0 to %d)",
         kTensorMapFields[field], ord, ords - 1);
  tensor_map *tm = (tensor_map *)(uintptr_t)map;
  int bit = 0;
  switch (field) {
  case 0:
    tm->global_address = (uint64_t)value;
    bit = kSetAddress;
    break;
  case 1:
    tm->rank_m1 = saturate8(value);
    bit = kSetRank;
    break;
  case 2:
    tm->box_dim[ord] = saturate16(value);
    bit = kSetBoxDim + ord;
    break;
  case 3:
    tm->global_dim[ord] = (uint64_t)value;
    bit = kSetGlobalDim + ord;
    break;
  case 4:
    tm->global_stride[ord] = (uint64_t)value;
    bit = kSetGlobalStride + ord;
    break;
  case 5:
    tm->element_stride[ord] = saturate8(value);
    bit = kSetElementStride + ord;
    break;
  case 6:
    tm->elemtype = saturate8(value);
    bit = kSetElemType;
    break;
  case 7:
    tm->interleave = saturate8(value);
    bit = kSetInterleave;
    break;
  case 8:
    tm->swizzle = saturate8(value);
    bit = kSetSwizzle;
    break;
  default:
    tm->fill = saturate8(value);
    bit = kSetFill;
    break;
  }
  tm->set |= 1u << bit;
  tensormap_state *e = tensormap_at(map);
  e->writer = s->current;
  e->replaced = ++s->tm_clock;
}

/* fence.proxy.tensormap::generic.release.gpu: publishes this thread's
 * replaces (of maps it modified last) to the tensormap proxy. */
EMU_API void kiln_emu_tensormap_release(void) {
  block_state *s = S;
  for (int i = 0; i < s->num_maps; ++i) {
    tensormap_state *e = &s->maps[i];
    if (e->writer == s->current && e->released <= e->replaced) {
      e->released = ++s->tm_clock;
      memcpy(e->image, (const void *)(uintptr_t)e->addr, kTensorMapBytes);
    }
  }
}

/* fence.proxy.tensormap::generic.acquire.gpu [map], 128 */
EMU_API void kiln_emu_tensormap_acquire(int64_t map) {
  block_state *s = S;
  check_tensor_map_address(map, "fence.proxy.tensormap::generic.acquire");
  int known = 0;
  for (int i = 0; i < s->num_maps; ++i)
    known |= s->maps[i].addr == map;
  tensormap_state *e = tensormap_at(map);
  if (!known || memcmp(e->image, (const void *)(uintptr_t)map, kTensorMapBytes)) {
    /* Never replaced here, or its bytes changed since: a map built elsewhere
     * (in shared memory) and copied here by generic stores before this
     * thread's release, which the emulator does not see (a slot rebuilt in
     * each iteration of an outer loop, too). It takes the protocol state of
     * this thread's released map with the same bytes; none: the use reports
     * it unbuilt or changed. */
    for (int i = 0; i < s->num_maps; ++i) {
      tensormap_state *src = &s->maps[i];
      if (src != e && src->writer == s->current && src->released > src->replaced &&
          !memcmp(src->image, (const void *)(uintptr_t)map, kTensorMapBytes)) {
        e->writer = src->writer;
        e->replaced = src->replaced;
        e->released = src->released;
        memcpy(e->image, src->image, kTensorMapBytes);
        break;
      }
    }
  }
  s->tm_acquired[s->current][e - s->maps] = ++s->tm_clock;
}

/* The emulator's cuTensorMapEncodeTiled (same parameters, CUresult-like
 * result: 0, or 1 for CUDA_ERROR_INVALID_VALUE): the runtime encodes the
 * tensor maps a bundle's manifest lists (`tensor_map`) with it at each
 * launch of an emu-sm_XY kernel, as it does with the driver's on a GPU. It
 * refuses what the driver's documentation refuses (and what the emulator
 * does not model: interleave, L2 promotion is ignored); the map is then a
 * kernel parameter, valid without the release/acquire protocol. Exported:
 * the runtime looks it up in the loaded bundle. */
__attribute__((visibility("default"))) int kiln_emu_tensormap_encode(
    void *map, int data_type, uint32_t rank, void *global_address,
    const uint64_t *global_dim, const uint64_t *global_strides,
    const uint32_t *box_dim, const uint32_t *element_strides, int interleave,
    int swizzle, int l2_promotion, int oob_fill) {
  static const int8_t kElemBytes[13] = {1, 2, 4, 4, 8, 8, 2, 4, 4, 8, 2, 4, 4};
  (void)l2_promotion;
  if (!map || (uintptr_t)map % 64 || rank < 1 || rank > 5 || data_type < 0 ||
      data_type > 12 || (uintptr_t)global_address % 16 || interleave != 0 ||
      (swizzle != 0 && swizzle != 3) || (oob_fill != 0 && oob_fill != 1))
    return 1;
  int64_t esize = kElemBytes[data_type];
  for (uint32_t i = 0; i < rank; ++i) {
    if (global_dim[i] < 1 || global_dim[i] > (1ull << 32) || box_dim[i] < 1 ||
        box_dim[i] > 256 || element_strides[i] < 1 || element_strides[i] > 8)
      return 1;
    if (i + 1 < rank &&
        (global_strides[i] % 16 || global_strides[i] >= (1ull << 40)))
      return 1;
  }
  if (box_dim[0] * esize % 16 || (swizzle == 3 && box_dim[0] * esize > 128))
    return 1;
  tensor_map tm;
  memset(&tm, 0, sizeof tm);
  tm.global_address = (uint64_t)(uintptr_t)global_address;
  tm.rank_m1 = (uint8_t)(rank - 1);
  tm.elemtype = (uint8_t)data_type;
  tm.interleave = 0;
  tm.swizzle = (uint8_t)swizzle;
  tm.fill = (uint8_t)oob_fill;
  tm.set = 1u << kSetAddress | 1u << kSetRank | 1u << kSetElemType |
           1u << kSetInterleave | 1u << kSetSwizzle | 1u << kSetFill |
           1u << kSetEncoded;
  tm.encoded = kEncodedMagic;
  for (uint32_t i = 0; i < rank; ++i) {
    tm.global_dim[i] = global_dim[i];
    tm.box_dim[i] = (uint16_t)box_dim[i];
    tm.element_stride[i] = (uint8_t)element_strides[i];
    tm.set |= 1u << (kSetBoxDim + i) | 1u << (kSetGlobalDim + i) |
              1u << (kSetElementStride + i);
    if (i + 1 < rank) {
      tm.global_stride[i] = global_strides[i];
      tm.set |= 1u << (kSetGlobalStride + i);
    }
  }
  memset(map, 0, kTensorMapBytes);
  memcpy(map, &tm, sizeof tm);
  return 0;
}

/* The tensor map at `map` as a copy of rank `rank` uses it: built in this
 * block, released after its last replace, acquired by this thread after
 * that release, unchanged since, and valid (PTX ISA, "Tensor-map"; CUDA's
 * cuTensorMapEncodeTiled). Returns its element size in bytes. */
#define MAP_CHECK(cond, fmt, ...)                                              \
  do {                                                                         \
    if (!(cond))                                                               \
      fail("%s: cp.async.bulk.tensor with the tensor map at %llx: " fmt, site, \
           (unsigned long long)map, ##__VA_ARGS__);                            \
  } while (0)
#define MAP_SET(bit, name, ...)                                                \
  MAP_CHECK(tm->set >> (bit) & 1, name " was never set (tensormap.replace)",  \
            ##__VA_ARGS__)

static int64_t check_tensor_map(int64_t map, int32_t rank, const char *site) {
  block_state *s = S;
  static const int8_t kElemBytes[13] = {1, 2, 4, 4, 8, 8, 2, 4, 4, 8, 2, 4, 4};
  check_tensor_map_address(map, "cp.async.bulk.tensor");
  const tensor_map *tm = (const tensor_map *)(uintptr_t)map;
  if (tm->set >> kSetEncoded & 1 && tm->encoded == kEncodedMagic)
    goto fields; /* a launch parameter: nothing to release or acquire */
  tensormap_state *e = NULL;
  for (int i = 0; i < s->num_maps; ++i)
    if (s->maps[i].addr == map)
      e = &s->maps[i];
  MAP_CHECK(e && e->writer >= 0,
            "no thread of this block built it with tensormap.replace (the "
            "emulator checks maps built in the block)");
  MAP_CHECK(e->released > e->replaced,
            "thread %d modified it (tensormap.replace) with no "
            "fence.proxy.tensormap::generic.release after it",
            e->writer);
  MAP_CHECK(s->tm_acquired[s->current][e - s->maps] > e->released,
            "this thread has not acquired it "
            "(fence.proxy.tensormap::generic.acquire) since thread %d "
            "released it",
            e->writer);
  MAP_CHECK(!memcmp(e->image, (const void *)(uintptr_t)map, kTensorMapBytes),
            "its bytes changed since its release (only tensormap.replace, "
            "then a release, may modify a tensor map)");
fields:
  MAP_SET(kSetRank, "the rank");
  int map_rank = tm->rank_m1 + 1;
  MAP_CHECK(map_rank <= 5, "rank %d (PTX allows 1 to 5)", map_rank);
  MAP_CHECK(map_rank == rank,
            "rank %d, but the instruction is cp.async.bulk.tensor.%dd",
            map_rank, rank);
  MAP_SET(kSetAddress, "the global address");
  MAP_CHECK(tm->global_address % 16 == 0,
            "global address %llx is not 16-byte aligned",
            (unsigned long long)tm->global_address);
  MAP_SET(kSetElemType, "the element type");
  MAP_CHECK(tm->elemtype <= 12, "element type %d (PTX encodes 0 to 12)",
            tm->elemtype);
  int64_t esize = kElemBytes[tm->elemtype];
  for (int i = 0; i < rank; ++i) {
    MAP_SET(kSetBoxDim + i, "box_dim[%d]", i);
    MAP_CHECK(tm->box_dim[i] >= 1 && tm->box_dim[i] <= 256,
              "box_dim[%d] is %u (PTX allows 1 to 256)", i, tm->box_dim[i]);
    MAP_SET(kSetGlobalDim + i, "global_dim[%d]", i);
    MAP_CHECK(tm->global_dim[i] >= 1 && tm->global_dim[i] <= (1ull << 32),
              "global_dim[%d] is %llu (PTX allows 1 to 2^32)", i,
              (unsigned long long)tm->global_dim[i]);
    MAP_SET(kSetElementStride + i, "element_stride[%d]", i);
    MAP_CHECK(tm->element_stride[i] >= 1 && tm->element_stride[i] <= 8,
              "element_stride[%d] is %u (PTX allows 1 to 8)", i,
              tm->element_stride[i]);
    MAP_CHECK(tm->element_stride[i] == 1,
              "element_stride[%d] is %u: strided boxes are not supported by "
              "the emulator",
              i, tm->element_stride[i]);
  }
  for (int i = 0; i + 1 < rank; ++i) {
    MAP_SET(kSetGlobalStride + i, "global_stride[%d]", i);
    MAP_CHECK(tm->global_stride[i] % 16 == 0 &&
                  tm->global_stride[i] < (1ull << 40),
              "global_stride[%d] (of dimension %d) is %llu bytes (PTX "
              "requires a multiple of 16 below 2^40)",
              i, i + 1, (unsigned long long)tm->global_stride[i]);
  }
  MAP_CHECK(tm->box_dim[0] * esize % 16 == 0,
            "box_dim[0] is %u elements of %lld bytes, not a multiple of 16 "
            "bytes",
            tm->box_dim[0], (long long)esize);
  MAP_CHECK(tm->interleave <= 2, "interleave_layout %u (PTX encodes 0 to 2)",
            tm->interleave);
  MAP_CHECK(tm->interleave == 0,
            "interleave_layout %u is not supported by the emulator (only "
            "none, 0)",
            tm->interleave);
  MAP_CHECK(tm->swizzle <= 3, "swizzle_mode %u (sm_90a encodes 0 to 3)",
            tm->swizzle);
  MAP_CHECK(tm->swizzle == 0 || tm->swizzle == 3,
            "swizzle_mode %u is not supported by the emulator (only none, "
            "0, and 128B, 3)",
            tm->swizzle);
  MAP_CHECK(tm->swizzle != 3 || tm->box_dim[0] * esize == 128,
            "swizzle_mode 128B with box_dim[0] %u elements of %lld bytes: "
            "the emulator takes rows of exactly 128 bytes",
            tm->box_dim[0], (long long)esize);
  MAP_CHECK(tm->fill <= 1, "fill_mode %u (PTX encodes 0 to 1)", tm->fill);
  MAP_CHECK(tm->fill == 0,
            "fill_mode %u is not supported by the emulator (only zero fill, "
            "0)",
            tm->fill);
  return esize;
}

/* cp.async.bulk.tensor.<rank>d.shared::cluster.global.mbarrier::complete_tx
 * ::bytes [dst], [map, {c0, ...}], [bar]: box element (j0, j1, ...), j0
 * fastest, comes from tensor element (c0 + j0, c1 + j1, ...), zero when
 * outside the tensor, and lands densely at dst in box order. The copy is
 * done at issue; its bytes count as written by this thread (a race with
 * other threads' accesses since the last barrier) and belong to the
 * mbarrier's current phase, completed (as transaction bytes) at once. */
EMU_API void kiln_emu_tma_load(int64_t dst, int64_t map, int32_t rank,
                               int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                               int32_t c4, int64_t bar, const char *site) {
  block_state *s = S;
  int32_t t = s->current;
  if (rank < 1 || rank > 5)
    fail("%s: cp.async.bulk.tensor.%dd (PTX has 1d to 5d)", site, rank);
  mbarrier *m = mbarrier_at(bar, "cp.async.bulk.tensor");
  if (s->fibers[m->init_tid].proxy_fences <= m->init_proxy)
    fail("%s: cp.async.bulk.tensor completes on the mbarrier at shared byte "
         "%lld, which thread %d initialized with no fence.proxy.async (or "
         "fence.mbarrier_init) after it: the async proxy may not see the "
         "init",
         site, (long long)m->off, m->init_tid);
  int64_t esize = check_tensor_map(map, rank, site);
  const tensor_map *tm = (const tensor_map *)(uintptr_t)map;
  int64_t box = 1;
  for (int i = 0; i < rank; ++i)
    box *= tm->box_dim[i];
  int64_t bytes = box * esize;
  int64_t off = dst - (int64_t)(uintptr_t)s->smem;
  if (off < 0 || off + bytes > s->shared_bytes)
    fail("%s: cp.async.bulk.tensor of %lld bytes to shared byte %lld is "
         "outside the kernel's %lld bytes",
         site, (long long)bytes, (long long)off, (long long)s->shared_bytes);
  if (off % 128)
    fail("%s: cp.async.bulk.tensor destination (shared byte %lld) is not "
         "128-byte aligned",
         site, (long long)off);
  int swizzle = tm->swizzle == 3;
  if (swizzle && off % 1024)
    fail("%s: cp.async.bulk.tensor with the 128B swizzle to shared byte %lld, "
         "which is not 1024-byte aligned (the pattern repeats every 1024 "
         "bytes of address)",
         site, (long long)off);
  int k = (int)(m - s->mbars);
  for (int64_t i = off; i < off + bytes; ++i) {
    shadow *h = &s->shadow[i];
    if (h->mbar && mbarrier_byte(h, i))
      fail("%s: cp.async.bulk.tensor overwrites byte %lld of the mbarrier "
           "at shared byte %lld",
           site, (long long)i, (long long)s->mbars[h->mbar - 1].off);
    wgmma_write_check(h, i, site);
    int tma = tma_byte(h);
    if (tma && !tma_observed(h))
      fail("%s: cp.async.bulk.tensor overwrites shared byte %lld of a TMA "
           "copy (%s) whose mbarrier phase this thread has not waited for",
           site, (long long)i, h->w_site);
    if (h->w_epoch == s->epoch && h->w_tid != t && !tma)
      fail("data race on shared byte %lld: written here (%s), and thread %d "
           "wrote it since the last barrier (%s)",
           (long long)i, site, h->w_tid, h->w_site);
    if (h->r_epoch == s->epoch && h->r_tid != t)
      fail("data race on shared byte %lld: written here (%s), and %s read "
           "it since the last barrier (%s)",
           (long long)i, site,
           h->r_tid == -2 ? "several threads" : "another thread", h->r_site);
    h->w_epoch = s->epoch;
    h->w_tid = t;
    h->w_site = site;
    h->w_proxy = s->fibers[t].proxy_fences;
    h->tma_bar = k + 1;
    h->tma_phase = m->phase;
  }
  int32_t c[5] = {c0, c1, c2, c3, c4};
  int64_t j[5] = {0, 0, 0, 0, 0};
  for (int64_t e = 0; e < box; ++e) {
    /* The 128B swizzle permutes the 16-byte chunks of each 128-byte line by
     * the line's address bits 7-9 (PTX ISA, "Tensor-map swizzle modes"). */
    int64_t at = off + e * esize;
    unsigned char *out = s->smem + (swizzle ? swizzle128(at) : at);
    uint64_t src = tm->global_address;
    int inside = 1;
    for (int i = 0; i < rank; ++i) {
      int64_t x = (int64_t)c[i] + j[i];
      if (x < 0 || (uint64_t)x >= tm->global_dim[i])
        inside = 0;
      else
        src += (uint64_t)x * (i ? tm->global_stride[i - 1] : (uint64_t)esize);
    }
    if (inside)
      memcpy(out, (const void *)(uintptr_t)src, (size_t)esize);
    else
      memset(out, 0, (size_t)esize);
    for (int i = 0; i < rank && ++j[i] == tm->box_dim[i]; ++i)
      j[i] = 0;
  }
  m->tma_phase = m->phase + 1;
  m->tma_site = site;
  m->tma_issuers[t / 32] |= 1u << (t % 32);
  mbarrier_add_tx(m, -bytes, site);
  mbarrier_advance(m);
}

/* cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group [map, coords],
 * [src]: the box at `src` to the tensor, elements outside it not written.
 * The map is checked as a load's is; the shared bytes are read now (their
 * writers must have fenced them for the async proxy, as for wgmma), and
 * they may not be rewritten before the issuing thread's
 * cp.async.bulk.wait_group (checked at its next barrier). The global
 * writes land when that wait retires the group (kiln_emu_bulk_wait). */
EMU_API void kiln_emu_tma_store(int64_t src, int64_t map, int32_t rank,
                                int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                int32_t c4, const char *site) {
  block_state *s = S;
  fiber *f = &s->fibers[s->current];
  if (rank < 1 || rank > 5)
    fail("%s: cp.async.bulk.tensor.%dd (PTX has 1d to 5d)", site, rank);
  int64_t esize = check_tensor_map(map, rank, site);
  const tensor_map *tm = (const tensor_map *)(uintptr_t)map;
  if (tm->swizzle)
    fail("%s: a TMA store with a swizzled map (the emulator stores "
         "unswizzled boxes)",
         site);
  int64_t box = 1;
  for (int i = 0; i < rank; ++i)
    box *= tm->box_dim[i];
  int64_t off = src - (int64_t)(uintptr_t)s->smem;
  if (off < 0 || off + box * esize > s->shared_bytes)
    fail("%s: TMA store of %lld bytes from shared byte %lld is outside the "
         "kernel's %lld bytes",
         site, (long long)(box * esize), (long long)off,
         (long long)s->shared_bytes);
  if (off % 128)
    fail("%s: TMA store source (shared byte %lld) is not 128-byte aligned",
         site, (long long)off);
  for (int64_t i = off; i < off + box * esize; ++i) {
    const shadow *h = &s->shadow[i];
    if (unfenced_for_async(h))
      fail("%s: a TMA store reads shared byte %lld, which thread %d wrote "
           "(%s) without a fence.proxy.async after it",
           site, (long long)i, h->w_tid, h->w_site);
  }
  kiln_emu_shared_access(src, (int32_t)(box * esize), 0, site);
  int32_t c[5] = {c0, c1, c2, c3, c4};
  int64_t j[5] = {0, 0, 0, 0, 0};
  const unsigned char *in = s->smem + off;
  for (int64_t e = 0; e < box; ++e, in += esize) {
    uint64_t dst = tm->global_address;
    int inside = 1;
    for (int i = 0; i < rank; ++i) {
      int64_t x = (int64_t)c[i] + j[i];
      if (x < 0 || (uint64_t)x >= tm->global_dim[i])
        inside = 0;
      else
        dst += (uint64_t)x * (i ? tm->global_stride[i - 1] : (uint64_t)esize);
    }
    if (inside) {
      if (f->num_bulk_writes == f->cap_bulk_writes) {
        size_t cap = f->cap_bulk_writes ? 2 * f->cap_bulk_writes : 4096;
        void *w = realloc(f->bulk_writes, cap * sizeof *f->bulk_writes);
        if (!w) {
          fprintf(stderr, "kiln GPU emulator: out of memory\n");
          abort();
        }
        f->bulk_writes = w;
        f->cap_bulk_writes = cap;
      }
      struct bulk_write *w = &f->bulk_writes[f->num_bulk_writes++];
      w->dst = dst;
      w->group = UINT64_MAX;
      w->bytes = (int32_t)esize;
      memcpy(w->data, in, (size_t)esize);
    }
    for (int i = 0; i < rank && ++j[i] == tm->box_dim[i]; ++i)
      j[i] = 0;
  }
  f->bulk_uncommitted++;
}

EMU_API void kiln_emu_bulk_commit(void) {
  fiber *f = &S->fibers[S->current];
  for (size_t i = 0; i < f->num_bulk_writes; ++i)
    if (f->bulk_writes[i].group == UINT64_MAX)
      f->bulk_writes[i].group = f->next_bulk_group;
  f->next_bulk_group++;
  if (f->bulk_uncommitted)
    f->bulk_groups++;
  f->bulk_uncommitted = 0;
}

/* cp.async.bulk.wait_group n: all but the n most recent groups complete:
 * their global writes land now. */
EMU_API void kiln_emu_bulk_wait(int32_t n) {
  fiber *f = &S->fibers[S->current];
  if (n < 0)
    fail("cp.async.bulk.wait_group %d", n);
  uint64_t keep_from =
      f->next_bulk_group > (uint64_t)n ? f->next_bulk_group - n : 0;
  size_t live = 0;
  for (size_t i = 0; i < f->num_bulk_writes; ++i) {
    struct bulk_write w = f->bulk_writes[i];
    if (w.group != UINT64_MAX && w.group < keep_from) {
      memcpy((void *)(uintptr_t)w.dst, w.data, (size_t)w.bytes);
      continue;
    }
    f->bulk_writes[live++] = w;
  }
  f->num_bulk_writes = live;
  if (f->bulk_groups > n)
    f->bulk_groups = n;
}
