//===- CpuFeatures.h - Host CPU feature detection ---------------*- C++ -*-===//
//
// Detects the x86 features kiln bundles may require, as usable by this
// process: the CPU reports them (cpuid) and the OS saves their register state
// (xgetbv). KILN_CPU_DISABLE masks features on top of that.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_CPUFEATURES_H
#define KILN_RUNTIME_SRC_CPUFEATURES_H

#include "kiln/runtime.h"

#include <string>
#include <vector>

namespace kiln::rt {

/// Whether `name` is a feature name this runtime knows how to detect.
bool isKnownCpuFeature(const std::string &name);

/// Whether the host has the feature, KILN_CPU_DISABLE applied.
bool hostHasCpuFeature(const std::string &name);

/// Space-separated list of the host's features, KILN_CPU_DISABLE applied.
std::string hostCpuFeaturesString();

/// Refuses `features` unless the host has all of them; for amx-* features it
/// also obtains the OS permission to use AMX tile data (once per process).
/// `bundleName` only makes the message clearer.
kiln_status checkCpuFeatures(const std::vector<std::string> &features,
                             const std::string &bundleName);

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_CPUFEATURES_H
