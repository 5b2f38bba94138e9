// The median of a sample: one meaning in every part of tessel (the benchmarks, the training
// loop's step time, the CLI's demo), numpy's and Python's statistics.median's:
//
//   median({3, 1, 2}) == 2        the middle value of an odd count
//   median({4, 1, 3, 2}) == 2.5   the mean of the two middle values of an even one
//   median({1, NaN, 2}) is NaN    as numpy.median: a NaN anywhere makes the median NaN
//   median({}) throws             Error kInvalidArgument: no value has a median
#pragma once

#include <vector>

namespace tessel {

// The median of `values` (taken by value: the selection reorders its own copy).
double median(std::vector<double> values);

}  // namespace tessel
