// foresight-train: everything happens in trainer/cli (run_trainer_cli).
#include "trainer/cli.hpp"

int main(int argc, char** argv) { return foresight::trainer::run_trainer_cli(argc, argv); }
