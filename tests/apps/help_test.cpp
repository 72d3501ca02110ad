// Every subcommand answers --help with its usage and exit code 0 (STYLE.md item 12).
#include <gtest/gtest.h>

#include <sstream>

#include "apps/cli/cli.hpp"

TEST(Help, TopLevelListsEverySubcommand) {
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli({"--help"}, out, err), 0);
  for (const auto& c : foresight::cli::commands()) EXPECT_NE(out.str().find(c.name), std::string::npos) << c.name;
}

TEST(Help, EachSubcommandHasHelp) {
  for (const auto& c : foresight::cli::commands()) {
    std::ostringstream out, err;
    EXPECT_EQ(foresight::cli::run_cli({c.name, "--help"}, out, err), 0) << c.name << ": " << err.str();
    EXPECT_NE(out.str().find("Usage"), std::string::npos) << c.name;
    EXPECT_NE(out.str().find("--json"), std::string::npos) << c.name << " must offer --json";
  }
}
