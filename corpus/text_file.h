// Whole-file text readers shared by the libraries: a file read as text (decompressed by its magic
// bytes, corpus/decompress.h: the benchmark exports ship as .bz2) and RFC 4180 CSV. The line/document readers of corpora are corpus.h.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace lm::data {

// Reads a file, decompressed when it is gzip, zstd, bzip2 or xz (several concatenated streams, as
// pbzip2 writes, decode into one text). A missing file is NotFound "not found, expected PATH";
// corrupt or truncated data is DataLoss naming the file and the format.
absl::StatusOr<std::string> read_text_file(const std::string& path);

// RFC 4180 CSV: quoted fields, "" escapes, CRLF or LF; a UTF-8 BOM is dropped. An unterminated
// quote is DataLoss "SOURCE:LINE: ...".
absl::StatusOr<std::vector<std::vector<std::string>>> parse_csv(const std::string& text,
                                                                const std::string& source);

}  // namespace lm::data
