/*===- kiln_cpu_builtins.c - Conversions LLVM calls compiler-rt for -------===*
 *
 * Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
 * SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
 *
 * x86 kernels are linked without libraries, and the process that loads them
 * need not have compiler-rt's float conversions (libgcc has some of them, not
 * all, and only in recent versions). Where x86 has no instruction for a
 * conversion (f16 without F16C, as the x86-64-sse target; bf16 without
 * AVX512-BF16; f64 to either), LLVM calls these; kilnc links this object into
 * every CPU and emulator bundle, hidden, so a kernel never needs them from
 * the loader (it failed to load on an undefined symbol before).
 *
 * All round to nearest, ties to even, with correct rounding from f64 (through
 * f32 with round-to-odd), subnormals, infinities and quiet NaNs. The types
 * are the ABI's: _Float16 and __bf16 travel in XMM registers.
 *===----------------------------------------------------------------------===*/

#include <stdint.h>
#include <string.h>

#define KILN_BUILTIN __attribute__((visibility("hidden")))

static uint32_t bits32(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

static float from32(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static _Float16 half_from(uint16_t b) {
  _Float16 h;
  memcpy(&h, &b, 2);
  return h;
}

static __bf16 bf16_from(uint16_t b) {
  __bf16 h;
  memcpy(&h, &b, 2);
  return h;
}

/* f32 bits -> f16 bits. */
static uint16_t f32_to_f16(uint32_t f) {
  uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t a = f & 0x7fffffffu;
  if (a >= 0x7f800000u) /* inf; NaN stays a quiet NaN with its top payload */
    return (uint16_t)(sign | 0x7c00u |
                      (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));
  if (a >= 0x477ff000u) /* 65520 and above round to inf */
    return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) { /* a normal half: rebias, round at bit 13 */
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  if (a <= 0x33000000u) /* 2^-25 and below round to zero (2^-25: a tie) */
    return (uint16_t)sign;
  /* A subnormal half: round(value * 2^24). */
  uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e; /* 14 to 24 */
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), tie = 1u << (shift - 1);
  if (rem > tie || (rem == tie && (q & 1u)))
    ++q;
  return (uint16_t)(sign | q);
}

/* f16 bits -> f32 bits (exact). */
static uint32_t f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) /* inf, or a NaN made quiet (as F16C's vcvtph2ps) */
    return sign | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0u);
  if (e == 0) {
    if (!m)
      return sign;
    e = 113;
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    return sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  return sign | ((e + 112u) << 23) | (m << 13);
}

/* f32 bits -> bf16 bits. */
static uint16_t f32_to_bf16(uint32_t f) {
  if ((f & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((f >> 16) | 0x40u);
  f += 0x7fffu + ((f >> 16) & 1u);
  return (uint16_t)(f >> 16);
}

/* f64 -> f32 bits rounded to odd: a result that was inexact is moved toward
 * zero if rounding to nearest moved it away, and its last bit set. Rounding
 * that to 11 or 8 significant bits gives the correctly rounded result. */
static uint32_t f64_to_f32_odd(double d) {
  float f = (float)d;
  uint32_t b = bits32(f);
  if ((double)f != d && d == d) {
    double af = (double)f < 0 ? -(double)f : (double)f, ad = d < 0 ? -d : d;
    if (af > ad)
      b -= 1u;
    b |= 1u;
  }
  return b;
}

KILN_BUILTIN _Float16 __truncsfhf2(float f) { return half_from(f32_to_f16(bits32(f))); }
KILN_BUILTIN _Float16 __truncdfhf2(double d) { return half_from(f32_to_f16(f64_to_f32_odd(d))); }
KILN_BUILTIN float __extendhfsf2(_Float16 h) {
  uint16_t b;
  memcpy(&b, &h, 2);
  return from32(f16_to_f32(b));
}
KILN_BUILTIN double __extendhfdf2(_Float16 h) { return (double)__extendhfsf2(h); }
KILN_BUILTIN __bf16 __truncsfbf2(float f) { return bf16_from(f32_to_bf16(bits32(f))); }
KILN_BUILTIN __bf16 __truncdfbf2(double d) { return bf16_from(f32_to_bf16(f64_to_f32_odd(d))); }
