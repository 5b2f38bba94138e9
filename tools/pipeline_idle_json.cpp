#include "pipeline_idle_json.h"

#include <algorithm>
#include <string>

namespace tessel::cli {

double idle_less_transfer_over_bubble(const train::StageIdle& stage, double bubble) {
  return (stage.idle_fraction - stage.transfer_fraction) / bubble;
}

Json pipeline_idle_json(const train::PipelineSchedule& schedule, const train::PipelineIdle& idle) {
  const double bubble =
      train::bubble_formula(schedule.kind, schedule.stages, schedule.microbatches, schedule.chunks);
  const train::ScheduleSimulation simulation = train::simulate(schedule);
  const double windows = std::max(idle.windows, 1);
  Json stages = Json::array();
  for (size_t s = 0; s < idle.stages.size(); ++s) {
    const train::StageIdle& st = idle.stages[s];
    const auto measured = [&](double value, int significant) {
      return st.devices > 0 ? json_number(value, significant) : Json(nullptr);
    };
    stages.push_back(
        Json{{"stage", s},
             {"devices", st.devices},
             {"idle_fraction", measured(st.idle_fraction, 4)},
             {"bubble_formula", json_number(bubble, 4)},
             {"simulated_idle_fraction", json_number(simulation.idle_fraction.at(s), 4)},
             {"transfer_fraction", measured(st.transfer_fraction, 4)},
             {"transfer_seconds_per_step", measured(st.transfer_seconds / windows, 6)},
             {"computing_seconds_per_step", measured(st.computing_seconds / windows, 6)},
             {"communication_seconds_per_step", measured(st.communication_seconds / windows, 6)},
             {"idle_less_transfer_over_bubble",
              measured(idle_less_transfer_over_bubble(st, bubble), 4)}});
  }
  return Json{{"schedule", std::string(train::schedule_kind_name(schedule.kind))},
              {"stages", schedule.stages},
              {"microbatches", schedule.microbatches},
              {"chunks", schedule.chunks},
              {"bubble_formula", json_number(bubble, 4)},
              {"steps_measured", idle.windows},
              {"schedule_seconds_per_step", json_number(idle.wall_seconds / windows)},
              {"transfers_per_step", json_number(idle.transfers / windows)},
              {"stage_idle", stages}};
}

}  // namespace tessel::cli
