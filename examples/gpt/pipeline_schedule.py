"""Pipeline schedules as data, in Python: for p stages and m microbatches, the ordered forward and
backward actions each stage runs in a training step, made and checked before anything runs (the
Python side of examples/train/pipeline_schedule.h; docs/pipeline.md).

    s = make_schedule("1f1b", stages=2, microbatches=4)
    s.per_stage[0]        # [Action(stage=0, microbatch=0, op='F'), Action(0, 1, 'F'), ...]
    print(s)              # the actions per stage, the bubble and a time chart
    sim = simulate(s)     # idle fraction per stage, activations kept, an order to issue them
    bubble_formula(2, 4)  # (p - 1) / (m + p - 1) = 0.2

Piece s of the model runs on stage s. Dependencies: F(s, mb) needs F(s - 1, mb) (its input
activation); B(s, mb) needs F(s, mb) and B(s + 1, mb) (its output's gradient); the last stage's
B(mb) needs only its own F(mb) (the loss is computed there).

- gpipe: every stage all its forwards, then all its backwards; keeps m microbatches' activations.
- 1f1b (PipeDream-flush): stage s runs min(p - s - 1, m) forwards, then one forward and one
  backward alternately, then the remaining backwards; keeps at most min(p - s, m).

Bad sizes or an unknown kind: ValueError naming the values. simulate() refuses a list that
cannot run (a deadlock, a missing, repeated or misplaced action, a backward before its forward)
with a ValueError naming each stuck stage, the action it is at and the one it waits for.
"""
import collections

KINDS = ("gpipe", "1f1b")

# One action: `op` "F" (forward) or "B" (backward) of `microbatch` on `stage`.
Action = collections.namedtuple("Action", ["stage", "microbatch", "op"])


def label(action):
    """"F3" / "B3" of an Action or a plain (stage, microbatch, op) tuple."""
    _, microbatch, op = action
    return f"{op}{microbatch}"


def check_sizes(kind, stages, microbatches):
    if kind not in KINDS:
        raise ValueError(f"pipeline: unknown schedule '{kind}': expected one of {', '.join(KINDS)}")
    for what, n in (("stages", stages), ("microbatches", microbatches)):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"pipeline: {what} must be an integer >= 1, got {n!r}")


def bubble_formula(stages, microbatches):
    """The idle fraction of a gpipe or 1f1b step: (p - 1) / (m + p - 1)."""
    check_sizes("gpipe", stages, microbatches)
    return (stages - 1) / (microbatches + stages - 1)


class Schedule:
    """`kind`, `stages`, `microbatches` and `per_stage`: each stage's actions in its order."""

    def __init__(self, kind, stages, microbatches, per_stage):
        self.kind, self.stages, self.microbatches = kind, stages, microbatches
        self.per_stage = [list(actions) for actions in per_stage]

    def actions(self):
        """Every action, stage by stage."""
        return [a for actions in self.per_stage for a in actions]

    def __str__(self):
        sim = simulate(self)
        lines = [f"schedule {self.kind}: {self.stages} stages, {self.microbatches} microbatches; "
                 f"bubble (p-1)/(m+p-1) = {bubble_formula(self.stages, self.microbatches):.4f}, "
                 f"simulated idle {max(sim.idle_fraction):.4f} on the idlest stage (forward 1, "
                 f"backward 2); activations kept at most: "
                 f"{', '.join(map(str, sim.max_in_flight))} microbatches per stage"]
        lines += [f"stage {s}: {' '.join(label(a) for a in actions)}"
                  for s, actions in enumerate(self.per_stage)]
        columns = int(sim.makespan)
        if columns > 240:
            lines.append(f"(time chart left out: {columns} columns)")
            return "\n".join(lines)
        width = max(len(label(t.action)) for t in sim.timeline)
        chart = [["."] * columns for _ in range(self.stages)]
        for t in sim.timeline:
            for c in range(int(t.start), int(t.end)):
                chart[t.action.stage][c] = label(t.action)
        lines.append("time (one column per forward; a backward takes two):")
        lines += [f"stage {s} |" + "".join(f"{cell:<{width}}|" for cell in row)
                  for s, row in enumerate(chart)]
        return "\n".join(lines)


def make_schedule(kind, stages, microbatches):
    """The schedule `kind` ("gpipe" or "1f1b") of `stages` stages and `microbatches`."""
    check_sizes(kind, stages, microbatches)
    per_stage = []
    for s in range(stages):
        forwards = [Action(s, mb, "F") for mb in range(microbatches)]
        backwards = [Action(s, mb, "B") for mb in range(microbatches)]
        warmup = microbatches if kind == "gpipe" else min(stages - s - 1, microbatches)
        actions = forwards[:warmup]
        for f, b in zip(forwards[warmup:], backwards):  # one forward, one backward
            actions += [f, b]
        actions += backwards[microbatches - warmup:]
        per_stage.append(actions)
    return Schedule(kind, stages, microbatches, per_stage)


TimedAction = collections.namedtuple("TimedAction", ["action", "start", "end"])


class Simulation:
    """makespan; per stage busy time, idle_fraction (1 - busy / makespan) and max_in_flight (the
    most microbatches whose forward has run there and whose backward has not: the activations
    kept); timeline: every action with its times, by start (ties by stage): an order in which one
    thread can issue the whole step."""

    def __init__(self, makespan, busy, max_in_flight, timeline):
        self.makespan, self.busy = makespan, busy
        self.idle_fraction = [1 - b / makespan if makespan > 0 else 0.0 for b in busy]
        self.max_in_flight, self.timeline = max_in_flight, timeline


def _check_actions(schedule):
    """Each stage's list as Actions (plain (stage, microbatch, op) tuples too), after checking
    one F and one B of each (stage, microbatch) on that stage's list, the F first."""
    broken = _refusal(schedule)
    if len(schedule.per_stage) != schedule.stages:
        broken(f"{len(schedule.per_stage)} action lists for {schedule.stages} stages")
    seen, per_stage = set(), []
    for s, actions in enumerate(schedule.per_stage):
        per_stage.append([])
        for a in actions:
            if (not isinstance(a, tuple) or len(a) != 3 or a[0] != s or a[2] not in ("F", "B")
                    or a[1] not in range(schedule.microbatches)):
                broken(f"stage {s} lists {a!r}: not (stage, microbatch, 'F' or 'B') of this "
                       f"stage with a microbatch in range")
            a = Action(*a)
            per_stage[-1].append(a)
            if a in seen:
                broken(f"stage {s} runs {label(a)} twice")
            if a.op == "B" and Action(s, a.microbatch, "F") not in seen:
                broken(f"stage {s} runs {label(a)} before its forward")
            seen.add(a)
    for s in range(schedule.stages):
        for mb in range(schedule.microbatches):
            for op in "FB":
                if Action(s, mb, op) not in seen:
                    broken(f"{op}{mb} of stage {s} is missing")
    return per_stage


def _refusal(schedule):
    """A function raising ValueError naming the schedule and its sizes, then `message`."""
    def broken(message):
        raise ValueError(f"pipeline: schedule {schedule.kind} ({schedule.stages} stages, "
                         f"{schedule.microbatches} microbatches): {message}")
    return broken


def dependencies(schedule, action):
    """What `action` waits for besides its stage's previous action."""
    s, mb = action.stage, action.microbatch
    if action.op == "F":
        return [Action(s - 1, mb, "F")] if s > 0 else []
    return [Action(s, mb, "F")] + ([Action(s + 1, mb, "B")] if s + 1 < schedule.stages else [])


def simulate(schedule, forward_cost=1.0, backward_cost=2.0):
    """Runs the lists as a pipeline would: each stage its actions in order, each as soon as the
    stage is free and what it depends on has ended (transfers take no time)."""
    per_stage = _check_actions(schedule)
    ended, timeline = {}, []
    position = [0] * schedule.stages
    free_at = [0.0] * schedule.stages
    busy = [0.0] * schedule.stages
    in_flight, max_in_flight = [0] * schedule.stages, [0] * schedule.stages
    remaining = sum(len(actions) for actions in per_stage)
    while remaining:
        progressed = False
        for s, actions in enumerate(per_stage):
            while position[s] < len(actions):
                a = actions[position[s]]
                deps = dependencies(schedule, a)
                if any(d not in ended for d in deps):
                    break
                start = max([free_at[s]] + [ended[d] for d in deps])
                cost = forward_cost if a.op == "F" else backward_cost
                ended[a] = free_at[s] = start + cost
                busy[s] += cost
                in_flight[s] += 1 if a.op == "F" else -1
                max_in_flight[s] = max(max_in_flight[s], in_flight[s])
                timeline.append(TimedAction(a, start, start + cost))
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            waits = []
            for s, actions in enumerate(per_stage):
                if position[s] < len(actions):
                    a = actions[position[s]]
                    d = next(d for d in dependencies(schedule, a) if d not in ended)
                    waits.append(f"stage {s} at {label(a)} waits for {label(d)} of stage {d.stage}")
            _refusal(schedule)(f"deadlock: {'; '.join(waits)}")
    timeline.sort(key=lambda t: (t.start, t.action.stage))
    return Simulation(max(free_at), busy, max_in_flight, timeline)
