//===- Main.cpp - Catch2 entry point for Kiln's C++ unit tests -------------===//
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
