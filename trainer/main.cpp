// foresight-train: everything happens in trainer/cli (run_trainer_cli).
#include <cstdio>

#include "trainer/cli.hpp"

int main(int argc, char** argv) {
  // One line per step as it happens, also into a file or a pipe (a run cut off by a time limit
  // still shows how far it got).
  std::setvbuf(stdout, nullptr, _IOLBF, 1 << 16);
  return foresight::trainer::run_trainer_cli(argc, argv);
}
