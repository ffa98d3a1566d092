// Reads of memory-mapped files that survive the file shrinking under them (issue 40 item 5). A
// token shard cut short while `fit` ran killed it with "Bus error" (exit 135): no message and no
// stop checkpoint, because a read of a mapped page past the file's new end raises SIGBUS.
// MappedFile (core/file.h) registers each mapping here. The guard's SIGBUS handler, for a fault
// inside a registered mapping, maps a page of zeros over the faulting page (so the read goes on,
// reading zeros) and records the file; the trainer looks at mapped_file_fault() before it trains
// on a window and stops cleanly, without training on the zeros. Any other SIGBUS keeps the default
// action (the process dies, as before).
#pragma once

#include <cstddef>
#include <string>

namespace lm {

// Installs the SIGBUS handler (once; later calls do nothing).
void install_mapped_file_guard();

// MappedFile's bookkeeping: a mapping of `size` bytes at `start` of file `path`.
void register_mapping(const void* start, size_t size, const std::string& path);
void unregister_mapping(const void* start);

// The file of the first fault the guard caught in this process ("" none).
std::string mapped_file_fault();

}  // namespace lm
