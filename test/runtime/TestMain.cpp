//===- TestMain.cpp - Catch2 main for the runtime tests
//--------------------===//

#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
