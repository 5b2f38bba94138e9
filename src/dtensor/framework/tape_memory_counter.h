// Internal: the counters behind tape_memory_stats() (tape_memory.cpp). A tape calls keep() for
// each tensor a record holds for its backward pass and release() when it lets the record go;
// each storage is counted once per device however many records and tapes hold it.
#pragma once

#include "tessel/dtensor/dtensor.h"

namespace tessel::detail {

// Abstract DTensors and null ones count nothing.
void tape_memory_keep(const DTensor& tensor);
void tape_memory_release(const DTensor& tensor);

}  // namespace tessel::detail
