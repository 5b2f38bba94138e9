// Internal to the CLI: a pipeline's measured idle (examples/train/pipeline_idle.h) as JSON, for
// `tessel bench gpt --json` and `tessel train gpt --json` on a stage mesh.
//
//   {"schedule":"1f1b","stages":2,"microbatches":8,"chunks":1,"bubble_formula":0.1111,
//    "schedule_seconds_per_step":0.12,"transfers_per_step":18,
//    "stage_idle":[{"stage":0,"devices":1,"idle_fraction":0.14,"bubble_formula":0.1111,
//                   "simulated_idle_fraction":0.1111,"transfer_fraction":0.01,
//                   "transfer_seconds_per_step":..., "computing_seconds_per_step":...,
//                   "communication_seconds_per_step":...,
//                   "idle_less_transfer_over_bubble":1.17}, ...]}
//
// Per stage: idle_fraction (1 - computing / the schedule's wall time, over every window added),
// the formula's bubble and the simulated one (forward 1, backward 2), transfer_fraction (its
// transfers between stages / wall) and (idle - transfer) / bubble, whose goal is <= 1.2. A stage
// of another process (devices 0) has nulls for its measured figures.
#pragma once

#include "json_output.h"
#include "pipeline_idle.h"
#include "pipeline_schedule.h"

namespace tessel::cli {

// (idle - transfer fraction) / bubble.
double idle_less_transfer_over_bubble(const train::StageIdle& stage, double bubble);

Json pipeline_idle_json(const train::PipelineSchedule& schedule, const train::PipelineIdle& idle);

}  // namespace tessel::cli
