//===- CpuFeatures.cpp - Host CPU feature detection
//------------------------===//
//
// cpuid alone is not enough: a feature whose registers the OS does not save
// on context switch (XCR0) must be treated as absent, otherwise a kernel
// using it would corrupt or fault at the first preemption. AMX additionally
// needs a per-process permission from Linux (arch_prctl) before the first
// tile instruction, or the kernel is killed with SIGILL.
//
//===----------------------------------------------------------------------===//

#include "CpuFeatures.h"
#include "Status.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KILN_HOST_X86 1
#endif

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kiln::rt {

namespace {

/// The features in their documented order (kiln_cpu_features_string).
constexpr const char *kFeatureNames[] = {
    "sse4.2",     "avx",      "avx2",       "fma",
    "f16c",       "avx512f",  "avx512bw",   "avx512vl",
    "avx512dq",   "avx512cd", "avx512vnni", "avx512bf16",
    "avx512fp16", "amx-tile", "amx-bf16",   "amx-int8"};
constexpr size_t kNumFeatures =
    sizeof(kFeatureNames) / sizeof(kFeatureNames[0]);

int featureIndex(const std::string &name) {
  for (size_t i = 0; i < kNumFeatures; ++i)
    if (name == kFeatureNames[i])
      return static_cast<int>(i);
  return -1;
}

#ifdef KILN_HOST_X86
uint64_t readXcr0() {
  uint32_t eax, edx;
  // xgetbv as raw bytes: the intrinsic needs -mxsave on the whole file.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
  return uint64_t(edx) << 32 | eax;
}

bool bit(uint32_t value, int index) { return (value >> index) & 1u; }

/// Raw detection, done once: cpuid results cannot change during a process.
uint32_t detectFeatures() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  unsigned maxLeaf = __get_cpuid_max(0, nullptr);
  if (maxLeaf < 1)
    return 0;
  __cpuid_count(1, 0, eax, ebx, ecx, edx);
  bool sse42 = bit(ecx, 20), fma = bit(ecx, 12), osxsave = bit(ecx, 27),
       avx = bit(ecx, 28), f16c = bit(ecx, 29);

  uint64_t xcr0 = osxsave ? readXcr0() : 0;
  bool osAvx = (xcr0 & 0x6) == 0x6;               // SSE + AVX (YMM) state.
  bool osAvx512 = osAvx && (xcr0 & 0xe0) == 0xe0; // opmask, ZMM_Hi256, Hi16.
  bool osAmx = (xcr0 & 0x60000) == 0x60000;       // XTILECFG + XTILEDATA.

  uint32_t leaf7ebx = 0, leaf7ecx = 0, leaf7edx = 0, leaf71eax = 0;
  if (maxLeaf >= 7) {
    unsigned maxSubleaf;
    __cpuid_count(7, 0, maxSubleaf, ebx, ecx, edx);
    leaf7ebx = ebx;
    leaf7ecx = ecx;
    leaf7edx = edx;
    if (maxSubleaf >= 1) {
      __cpuid_count(7, 1, eax, ebx, ecx, edx);
      leaf71eax = eax;
    }
  }

  bool has[kNumFeatures] = {
      sse42,
      avx && osAvx,
      osAvx && bit(leaf7ebx, 5),
      osAvx && fma,
      osAvx && f16c,
      osAvx512 && bit(leaf7ebx, 16), // avx512f
      osAvx512 && bit(leaf7ebx, 30), // avx512bw
      osAvx512 && bit(leaf7ebx, 31), // avx512vl
      osAvx512 && bit(leaf7ebx, 17), // avx512dq
      osAvx512 && bit(leaf7ebx, 28), // avx512cd
      osAvx512 && bit(leaf7ecx, 11), // avx512vnni
      osAvx512 && bit(leaf71eax, 5), // avx512bf16
      osAvx512 && bit(leaf7edx, 23), // avx512fp16
      osAmx && bit(leaf7edx, 24),    // amx-tile
      osAmx && bit(leaf7edx, 22),    // amx-bf16
      osAmx && bit(leaf7edx, 25),    // amx-int8
  };
  uint32_t mask = 0;
  for (size_t i = 0; i < kNumFeatures; ++i)
    if (has[i])
      mask |= 1u << i;
  return mask;
}
#else
uint32_t detectFeatures() { return 0; }
#endif

uint32_t rawFeatures() {
  static const uint32_t features = detectFeatures();
  return features;
}

/// Features named in KILN_CPU_DISABLE. Read on every call so tests (and
/// users) can change it at run time; it is only consulted off the launch path.
uint32_t disabledFeatures() {
  const char *env = std::getenv("KILN_CPU_DISABLE");
  if (!env)
    return 0;
  uint32_t mask = 0;
  std::string text(env);
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of(", ", start);
    if (end == std::string::npos)
      end = text.size();
    int index = featureIndex(text.substr(start, end - start));
    if (index >= 0)
      mask |= 1u << index;
    start = end + 1;
  }
  return mask;
}

uint32_t hostFeatures() { return rawFeatures() & ~disabledFeatures(); }

#if defined(__linux__) && defined(__x86_64__)
/// Asks Linux for permission to use AMX tile data. The answer is cached: the
/// permission is per process and cannot be revoked.
int requestAmxPermission() {
  static std::once_flag once;
  static int error = 0;
  std::call_once(once, [] {
    constexpr int kArchReqXcompPerm = 0x1023;
    constexpr int kXFeatureXTileData = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXFeatureXTileData) != 0)
      error = errno ? errno : EPERM;
  });
  return error;
}
#else
int requestAmxPermission() { return ENOSYS; }
#endif

} // namespace

bool isKnownCpuFeature(const std::string &name) {
  return featureIndex(name) >= 0;
}

bool hostHasCpuFeature(const std::string &name) {
  int index = featureIndex(name);
  return index >= 0 && (hostFeatures() >> index & 1u);
}

std::string hostCpuFeaturesString() {
  uint32_t features = hostFeatures();
  std::string result;
  for (size_t i = 0; i < kNumFeatures; ++i) {
    if (!(features >> i & 1u))
      continue;
    if (!result.empty())
      result += ' ';
    result += kFeatureNames[i];
  }
  return result;
}

kiln_status checkCpuFeatures(const std::vector<std::string> &features,
                             const std::string &bundleName) {
  uint32_t host = hostFeatures();
  uint32_t disabled = disabledFeatures();
  std::string missing;
  bool needsAmx = false;
  for (const std::string &feature : features) {
    int index = featureIndex(feature);
    if (index >= 0 && (host >> index & 1u)) {
      needsAmx |= feature.rfind("amx-", 0) == 0;
      continue;
    }
    if (!missing.empty())
      missing += ", ";
    missing += feature;
    if (index < 0)
      missing += " (unknown to this runtime)";
    else if (disabled >> index & 1u)
      missing += " (disabled by KILN_CPU_DISABLE)";
  }
  if (!missing.empty()) {
    std::string hostList = hostCpuFeaturesString();
    return makeStatus(KILN_ERROR_MISSING_FEATURE,
                      "bundle '%s' requires CPU feature(s) this host lacks: "
                      "%s; host has: %s",
                      bundleName.c_str(), missing.c_str(),
                      hostList.empty() ? "(none)" : hostList.c_str());
  }
  if (needsAmx) {
    if (int error = requestAmxPermission())
      return makeStatus(KILN_ERROR_MISSING_FEATURE,
                        "bundle '%s' uses AMX, but the OS refused permission "
                        "for AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM): "
                        "%s",
                        bundleName.c_str(), std::strerror(error));
  }
  return nullptr;
}

} // namespace kiln::rt

extern "C" {

int kiln_cpu_has_feature(const char *name) {
  if (!name)
    return 0;
  try {
    return kiln::rt::hostHasCpuFeature(name) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

const char *kiln_cpu_features_string(void) {
  // Thread-local so that concurrent callers never see a buffer being
  // rewritten; the list is short (every name fits in 256 bytes).
  static thread_local char buffer[256];
  try {
    std::string features = kiln::rt::hostCpuFeaturesString();
    std::snprintf(buffer, sizeof(buffer), "%s", features.c_str());
  } catch (...) {
    buffer[0] = '\0';
  }
  return buffer;
}

} // extern "C"
