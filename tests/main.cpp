// The doctest runner for the host tests (compiled by the host compiler).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
