// Files written whole or not at all: what every command that writes a result uses (profiles,
// plans, reports, the trainer's --time-ops).
#pragma once

#include <filesystem>
#include <string>

namespace foresight {

/// Writes `text` to `path` whole or not at all (a temporary file beside it, then a rename);
/// SpecError naming `option` when the file cannot be written.
void write_file_atomically(const std::filesystem::path& path, const std::string& text, const std::string& option = "--out");

}  // namespace foresight
