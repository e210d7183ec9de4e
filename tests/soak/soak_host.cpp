// tests/soak/soak_host.cpp: the soak (soak.hpp) on the host platform, each rank a thread; CI runs it
// with few calls (scripts/test).
#include "soak.hpp"

int main(int argc, char** argv) { return ark_soak::soak_main<ark::platform::host>(argc, argv, "host"); }
