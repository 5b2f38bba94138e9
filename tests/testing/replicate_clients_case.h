// One replicate() program run by every client of a multi-client program (simulated clients in
// tests/replicate/replicate_clients_test.cpp, processes under mpirun in
// tests/mpi/mpi_replicate_test.cpp) and by one process alone: the replicas' outputs must be the
// same, and equal to what plain arithmetic over the replicas' inputs gives.
#pragma once

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/replicate/compile.h"
#include "tessel/replicate/replicate.h"

namespace tessel::testing {

inline constexpr int64_t kReplicaElements = 6;

// Replica r's input: element i = (r + 1) / 2 + i (halves: exact in f32 sums).
inline std::vector<std::vector<Tensor>> replica_inputs(int replicas) {
  std::vector<Tensor> values;
  for (int r = 0; r < replicas; ++r) {
    std::vector<float> v;
    for (int64_t i = 0; i < kReplicaElements; ++i) v.push_back(0.5f * (r + 1) + static_cast<float>(i));
    values.push_back(Tensor::from_vector<float>(v, Shape{kReplicaElements}));
  }
  return {values};
}

// The broadcast input w: element i = i + 1.
inline Tensor replica_weights() {
  std::vector<float> w;
  for (int64_t i = 0; i < kReplicaElements; ++i) w.push_back(static_cast<float>(i + 1));
  return Tensor::from_vector<float>(w, Shape{kReplicaElements});
}

// Outputs: [sum over replicas of x * w, mean of x * w, all_gather(x), broadcast of the last
// replica's x, this replica's x * w + replica id].
inline ReplicaComputation replicate_case_computation(int replicas) {
  return [replicas](ReplicaContext& ctx, const std::vector<DTensor>& in) {
    const DTensor y = multiply(in[0], in[1]);
    return std::vector<DTensor>{ctx.all_reduce(y, ReduceOp::kSum),
                                ctx.all_reduce(y, ReduceOp::kMean), ctx.all_gather(in[0], 0),
                                ctx.broadcast(in[0], replicas - 1),
                                add(y, static_cast<double>(ctx.replica_id()))};
  };
}

// `cores` > 1: each replica's computation is DTensor SPMD over its cores.
inline ReplicateOptions case_options(Runtime& runtime, int replicas, int cores = 1) {
  ReplicateOptions options;
  options.metadata.num_replicas = replicas;
  options.metadata.num_cores_per_replica = cores;
  options.metadata.use_spmd_for_xla_partitioning = cores > 1;
  options.runtime = &runtime;
  options.timeout = std::chrono::seconds(30);
  return options;
}

inline std::vector<std::vector<DTensor>> run_replicate_case(Runtime& runtime, int replicas) {
  return replicate(replicate_case_computation(replicas), replica_inputs(replicas),
                   {replica_weights()}, {}, {}, case_options(runtime, replicas));
}

// The same computation through compile() and CompiledComputation::run. The trace fixes
// ctx.replica_id() at 0 (compile.h), so the last output is x * w on every replica.
inline std::vector<std::vector<DTensor>> run_compiled_case(Runtime& runtime, int replicas) {
  CompileOptions options;
  options.replicate = case_options(runtime, replicas);
  const CompilationResult compiled =
      compile(Function("replicate_case", replicate_case_computation(replicas)),
              {InputSpec(Shape{kReplicaElements}), InputSpec(Shape{kReplicaElements})}, options);
  if (!compiled.ok()) throw compiled.error();
  return compiled.computation()->run(replica_inputs(replicas), {replica_weights()});
}

// Three mirrored f32 variables, each starting as replica_weights(), with the aggregations SUM,
// MEAN and ONLY_FIRST_REPLICA. Fresh tensors on every call (a client's own copy).
inline std::vector<ReplicatedVariable> mirrored_variables() {
  std::vector<ReplicatedVariable> variables;
  const std::pair<const char*, VariableAggregation> kinds[] = {
      {"sum", VariableAggregation::kSum},
      {"mean", VariableAggregation::kMean},
      {"first", VariableAggregation::kOnlyFirstReplica}};
  for (const auto& [name, aggregation] : kinds) {
    variables.push_back(ReplicatedVariable::mirrored(name, replica_weights(), {}, aggregation));
  }
  return variables;
}

// Replica r assigns every variable v its value times r's input plus r, after an all-reduce
// (a cross-replica collective before the write-back), unless it is `skipping` (-1: none);
// replicate() writes the results back into `variables`' tensors.
inline void run_mirrored_case(Runtime& runtime, int replicas,
                              const std::vector<ReplicatedVariable>& variables, int skipping = -1,
                              int cores = 1) {
  replicate(
      [skipping](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        const DTensor total = ctx.all_reduce(in[0]);
        if (ctx.replica_id() == skipping) return std::vector<DTensor>{total};
        for (int k = 0; k < static_cast<int>(in.size()) - 1; ++k) {
          ctx.assign_variable(
              k, add(multiply(ctx.read_variable(k), in[0]), static_cast<double>(ctx.replica_id())));
        }
        return std::vector<DTensor>{total};
      },
      replica_inputs(replicas), {}, variables, {}, case_options(runtime, replicas, cores));
}

// What mirrored_variables() hold after run_mirrored_case, computed here as the write-back
// combines (replica 0's value, then replicas 1, 2, ... added in order; the mean divides).
inline std::vector<std::vector<float>> expected_mirrored_values(int replicas) {
  const std::vector<std::vector<Tensor>> in = replica_inputs(replicas);
  const std::vector<float> w = replica_weights().to_vector<float>();
  std::vector<float> sum(kReplicaElements, 0), first;
  for (int q = 0; q < replicas; ++q) {
    const std::vector<float> x = in[0][static_cast<size_t>(q)].to_vector<float>();
    for (int64_t i = 0; i < kReplicaElements; ++i) {
      const float value = w[i] * x[i] + static_cast<float>(q);
      sum[static_cast<size_t>(i)] += value;
      if (q == 0) first.push_back(value);
    }
  }
  std::vector<float> mean = sum;
  for (float& m : mean) m /= static_cast<float>(replicas);
  return {sum, mean, first};
}

inline std::vector<float> host_floats(const DTensor& d) { return to_host(d).to_vector<float>(); }

// What each output of replica r must hold, computed here (`compiled`: run_compiled_case's, whose
// last output has no replica id added).
inline std::vector<std::vector<float>> expected_replica_outputs(int replicas, int r,
                                                                bool compiled = false) {
  const std::vector<std::vector<Tensor>> in = replica_inputs(replicas);
  const std::vector<float> w = replica_weights().to_vector<float>();
  std::vector<float> sum(kReplicaElements, 0), gathered, last, mine;
  for (int q = 0; q < replicas; ++q) {
    const std::vector<float> x = in[0][static_cast<size_t>(q)].to_vector<float>();
    for (int64_t i = 0; i < kReplicaElements; ++i) sum[static_cast<size_t>(i)] += x[i] * w[i];
    gathered.insert(gathered.end(), x.begin(), x.end());
    if (q == replicas - 1) last = x;
    if (q == r) {
      for (int64_t i = 0; i < kReplicaElements; ++i)
        mine.push_back(x[i] * w[i] + (compiled ? 0.0f : static_cast<float>(r)));
    }
  }
  std::vector<float> mean = sum;
  for (float& m : mean) m /= static_cast<float>(replicas);
  return {sum, mean, gathered, last, mine};
}

// Checks replica r's outputs `got` against arithmetic and against `one_process` (the same
// replica's outputs of the run in one process).
inline void expect_replica_outputs(const std::vector<DTensor>& got,
                                   const std::vector<DTensor>& one_process, int replicas, int r,
                                   bool compiled = false) {
  const std::vector<std::vector<float>> want = expected_replica_outputs(replicas, r, compiled);
  ASSERT_EQ(got.size(), want.size()) << "replica " << r;
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(host_floats(got[k]), want[k]) << "replica " << r << " output " << k;
    EXPECT_EQ(host_floats(got[k]), host_floats(one_process[k])) << "replica " << r << " output " << k;
  }
}

}  // namespace tessel::testing
