// Internal: a table's OptimizationParameters to and from TF's proto form, and their checks
// (embedding_config.cpp uses these for each table).
#pragma once

#include <string>

#include "tessel/embedding/optimization_parameters.h"
#include "tessel/proto/embedding.pb.h"

namespace tessel::detail {

void optimization_to_proto(const OptimizationParameters& o, proto::OptimizationParametersProto& p);
// A known TF field tessel does not implement: kUnimplemented naming `table` and the field.
OptimizationParameters optimization_from_proto(const proto::OptimizationParametersProto& p,
                                               const std::string& table);
// kInvalidArgument naming the table, the optimizer and the value out of range.
void check_optimization_parameters(const OptimizationParameters& o, const std::string& table);

}  // namespace tessel::detail
