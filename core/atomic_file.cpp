#include "core/atomic_file.hpp"

#include <fstream>

#include "core/error.hpp"

namespace foresight {

void write_file_atomically(const std::filesystem::path& path, const std::string& text, const std::string& option) {
  // Written beside the target and renamed over it (rename is atomic within one file system), so a
  // reader sees the old file or the new one, never half of one; on any failure the partial file is
  // removed and the target is left as it was.
  const std::filesystem::path tmp = path.string() + ".partial";
  const SourceLocation where{"<command line>", 0, 0};
  std::error_code ec;
  {
    std::ofstream f(tmp);
    if (!f) throw SpecError(where, option, path.string(), "cannot be written (opening " + tmp.string() + " failed)");
    f << text;
    f.close();
    if (!f) {
      std::filesystem::remove(tmp, ec);
      throw SpecError(where, option, path.string(), "write failed (disk full or I/O error)");
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    throw SpecError(where, option, path.string(), "cannot be replaced: " + why);
  }
}

}  // namespace foresight
