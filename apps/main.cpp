// The `foresight` command line: everything happens in apps/cli (run_cli), so tests can call it.
#include <iostream>

#include "apps/cli/cli.hpp"

int main(int argc, char** argv) { return foresight::cli::run_cli(argc, argv, std::cout, std::cerr); }
