//===- CpuFeatureTests.cpp - Host CPU feature queries
//----------------------===//

#include "TestUtil.h"

#include <catch2/catch.hpp>

#include <sstream>

using namespace kiln::test;

extern "C" int kiln_test_c_api_smoke(void);

TEST_CASE("the feature string lists exactly the features the host has",
          "[cpu]") {
  std::string features = kiln_cpu_features_string();
  INFO("host features: " << features);
  std::istringstream words(features);
  std::string word;
  while (words >> word)
    CHECK(kiln_cpu_has_feature(word.c_str()));
  CHECK_FALSE(kiln_cpu_has_feature("avx10.9"));
  CHECK_FALSE(kiln_cpu_has_feature(""));
  CHECK_FALSE(kiln_cpu_has_feature(nullptr));
#if defined(__x86_64__)
  // Every x86-64 machine this project targets has SSE4.2.
  CHECK(kiln_cpu_has_feature("sse4.2"));
#endif
  // AVX-512 sub-features imply the foundation.
  if (kiln_cpu_has_feature("avx512bw"))
    CHECK(kiln_cpu_has_feature("avx512f"));
}

TEST_CASE("KILN_CPU_DISABLE masks features", "[cpu]") {
  if (!kiln_cpu_has_feature("sse4.2") || !kiln_cpu_has_feature("avx"))
    return;
  ScopedEnv disable("KILN_CPU_DISABLE", "sse4.2, avx");
  CHECK_FALSE(kiln_cpu_has_feature("sse4.2"));
  CHECK_FALSE(kiln_cpu_has_feature("avx"));
  std::string features = std::string(" ") + kiln_cpu_features_string() + " ";
  CHECK(features.find(" sse4.2 ") == std::string::npos);
  CHECK(features.find(" avx ") == std::string::npos);
}

TEST_CASE("the header works from C", "[capi]") {
  CHECK(kiln_test_c_api_smoke() == 0);
}

TEST_CASE("status helpers", "[capi]") {
  CHECK(kiln_status_code_of(nullptr) == KILN_OK);
  CHECK(std::string(kiln_status_message(nullptr)).empty());
  kiln_status_free(nullptr);
  CHECK(std::string(kiln_status_code_name(KILN_ERROR_CHECKSUM)) ==
        "KILN_ERROR_CHECKSUM");
  CHECK(std::string(kiln_dtype_name(KILN_DTYPE_BF16)) == "bf16");
  CHECK(kiln_dtype_size(KILN_DTYPE_F64) == 8);
  CHECK(kiln_dtype_size(KILN_DTYPE_I1) == 1);
  CHECK(std::string(kiln_runtime_version()) == "0.1.0");
}
