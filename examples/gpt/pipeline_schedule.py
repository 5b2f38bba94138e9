"""Pipeline schedules as data, in Python: for p stages, m microbatches and v model chunks per
stage (virtual stages), the ordered forward and backward actions each stage runs in a training
step, made and checked before anything runs (the Python side of
examples/train/pipeline_schedule.h; docs/pipeline.md).

    s = make_schedule("1f1b", stages=2, microbatches=4)
    s.per_stage[0]        # [Action(stage=0, microbatch=0, op='F', chunk=0), ...]
    print(s)              # the actions per stage, the bubble and a time chart
    sim = simulate(s)     # idle fraction per stage, activations kept, an order to issue them
    bubble_formula("1f1b", 2, 4)  # (p - 1) / (m + p - 1) = 0.2
    make_schedule("interleaved", 2, 4, chunks=2)   # labels "F3.1": microbatch 3, chunk 1
    make_schedule("zero-bubble", 2, 4)             # F, B (input gradient) and W (weights')

The model is cut into p * v pieces, the virtual stages 0 .. p v - 1 in the model's order;
virtual stage k runs on stage k % p as its chunk k // p (Megatron's interleaving: with v = 1,
stage s holds the piece s). Dependencies: F(k, mb) needs F(k - 1, mb) (its input activation);
B(k, mb) needs F(k, mb) and B(k + 1, mb) (its output's gradient); the last virtual stage's
B(mb) needs only its own F(mb) (the loss is computed there). A zero-bubble schedule splits
each backward in two: B(k, mb) computes only its input's gradient (what the previous stage waits
for), W(k, mb) the weights' gradients later, after B(k, mb) on the same stage
(GradientTape.backward_input / backward_weight).

- gpipe: every stage all its forwards, then all its backwards; keeps m microbatches' activations.
- 1f1b (PipeDream-flush): stage s runs min(p - s - 1, m) forwards, then one forward and one
  backward alternately, then the remaining backwards; keeps at most min(p - s, m).
- interleaved (Narayanan et al. 2021, Megatron-LM's interleaved 1F1B): v >= 2 chunks per
  stage, forwards in groups of p microbatches per chunk, warm-up (p - s - 1) * 2 + (v - 1) * p
  forwards (all of them when m == p); m must be a multiple of p.
- zero-bubble (ZB-H1 of Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): 1f1b's order of
  forwards and input backwards B; stage s runs each W s backwards after its B (the first s W's
  wait), the waiting ones at the end, so the W's fill the time a stage would wait for a
  gradient; keeps at most p microbatches' activations on every stage.
The bubble of gpipe and 1f1b is (p - 1) / (m + p - 1); interleaving cuts it to
(p - 1) / (v m + p - 1), zero-bubble to (p - 1) / (3 m + p - 1) (F, B and W of equal cost,
m >= p). The C++'s lists, rules, costs and printout, built the same way.

Bad sizes or an unknown kind: ValueError naming the values. simulate() refuses a list that
cannot run (a deadlock, a missing, repeated or misplaced action, a backward before its forward,
a W before its B or in a schedule that does not split backwards) with a ValueError naming each
stuck stage, the action it is at and the one it waits for.
"""
import collections

KINDS = ("gpipe", "1f1b", "interleaved", "zero-bubble")
ONE_CHUNK_KINDS = ("gpipe", "1f1b", "zero-bubble")  # the kinds of one model chunk per stage
SPLIT_KINDS = ("zero-bubble",)  # the kinds whose backwards are two actions, B and W
MAX_CHART_COLUMNS = 240  # wider time charts are left out of str(schedule)

# One action: `op` "F" (forward), "B" (backward; with zero-bubble its input's gradient only) or
# "W" (zero-bubble: the weights' gradients) of `microbatch` on `stage`, of its model chunk
# `chunk` (virtual stage chunk * p + stage; 0 unless interleaved).
Action = collections.namedtuple("Action", ["stage", "microbatch", "op", "chunk"], defaults=[0])


def label(action, with_chunk=False):
    """"F3" / "B3" / "W3" of an Action or a plain (stage, microbatch, op[, chunk]) tuple;
    with_chunk: "F3.1" (microbatch 3, chunk 1)."""
    a = Action(*action)
    return f"{a.op}{a.microbatch}.{a.chunk}" if with_chunk else f"{a.op}{a.microbatch}"


def check_sizes(kind, stages, microbatches, chunks=1):
    if kind not in KINDS:
        raise ValueError(f"pipeline: unknown schedule '{kind}': expected gpipe, 1f1b, "
                         f"interleaved or zero-bubble")
    for what, n in (("stages", stages), ("microbatches", microbatches), ("chunks", chunks)):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"pipeline: {what} must be an integer >= 1, got {n!r}")
    if kind != "interleaved" and chunks != 1:
        raise ValueError(f"pipeline: schedule {kind} runs one chunk per stage, got {chunks} "
                         f"chunks (interleaved runs several)")
    if kind == "interleaved":
        if chunks < 2:
            raise ValueError(f"pipeline: schedule interleaved needs >= 2 chunks per stage, got "
                             f"{chunks}")
        if microbatches % stages != 0:
            raise ValueError(f"pipeline: schedule interleaved needs the microbatches "
                             f"({microbatches}) to be a multiple of the stages ({stages}): its "
                             f"forwards go in groups of one microbatch per stage")


def bubble_formula(kind, stages, microbatches, chunks=1):
    """The idle fraction of a step of schedule `kind`: (p - 1) / (m + p - 1) for gpipe and 1f1b,
    (p - 1) / (v m + p - 1) for interleaved (chunks v >= 2), (p - 1) / (3 m + p - 1) for
    zero-bubble (a stage's W's fill all but p - 1 of its 3 m units: F, B and W one each;
    m >= p)."""
    check_sizes(kind, stages, microbatches, chunks)
    units = 3 * microbatches if kind in SPLIT_KINDS else chunks * microbatches
    return (stages - 1) / (units + stages - 1)


class Schedule:
    """`kind`, `stages`, `microbatches`, `chunks` and `per_stage`: each stage's actions in its
    order."""

    def __init__(self, kind, stages, microbatches, per_stage, chunks=1):
        self.kind, self.stages, self.microbatches = kind, stages, microbatches
        self.chunks = chunks
        self.per_stage = [list(actions) for actions in per_stage]

    @property
    def virtual_stages(self):
        return self.stages * self.chunks

    @property
    def splits_backward(self):
        """Whether each backward is two actions, B and W (zero-bubble)."""
        return self.kind in SPLIT_KINDS

    @property
    def ops(self):
        """The actions' ops each (virtual stage, microbatch) has: "FB", or "FBW" when split."""
        return "FBW" if self.splits_backward else "FB"

    def actions(self):
        """Every action, stage by stage."""
        return [a for actions in self.per_stage for a in actions]

    def __str__(self):
        """As `tessel train gpt --print-schedule` prints it (PipelineSchedule::to_string)."""
        sim = simulate(self)
        chunked, split = self.chunks > 1, self.splits_backward
        formula = ("(p-1)/(v*m+p-1)" if chunked else "(p-1)/(3*m+p-1)" if split
                   else "(p-1)/(m+p-1)")
        costs = ("forward 1, input backward 1, weight backward 1" if split
                 else "forward 1, backward 2")
        lines = [f"schedule {self.kind}: {self.stages} stages x {self.chunks} "
                 f"chunk{'s' if chunked else ''}, {self.microbatches} microbatches; bubble "
                 f"{formula} = "
                 f"{bubble_formula(self.kind, self.stages, self.microbatches, self.chunks):.4f}, "
                 f"simulated idle {max(sim.idle_fraction):.4f} on the idlest stage ({costs}); "
                 f"activations kept at most: "
                 f"{', '.join(map(str, sim.max_in_flight))} "
                 f"microbatch{' chunks' if chunked else 'es'} per stage"]
        lines += [f"stage {s}: {' '.join(label(a, chunked) for a in actions)}"
                  for s, actions in enumerate(self.per_stage)]
        columns = int(sim.makespan)
        if columns > MAX_CHART_COLUMNS:
            lines.append(f"(time chart left out: {columns} columns)")
            return "\n".join(lines)
        width = max(len(label(t.action, chunked)) for t in sim.timeline)
        chart = [["."] * columns for _ in range(self.stages)]
        for t in sim.timeline:
            for c in range(int(t.start), int(t.end)):
                chart[t.action.stage][c] = label(t.action, chunked)
        lines.append("time (one column per forward, input backward or weight backward):" if split
                     else "time (one column per forward; a backward takes two):")
        lines += [f"stage {s} |" + "".join(f"{cell:<{width}}|" for cell in row)
                  for s, row in enumerate(chart)]
        return "\n".join(lines)


def _one_forward_one_backward(forwards, backwards, warmup):
    """`warmup` forwards, then one forward and one backward alternately, then the remaining
    backwards."""
    actions = forwards[:warmup]
    for f, b in zip(forwards[warmup:], backwards):
        actions += [f, b]
    return actions + backwards[len(forwards) - warmup:]


def _with_weight_backwards(one_f_one_b, s):
    """ZB-H1: `one_f_one_b` (stage s's 1f1b order, its backwards now input backwards B) with each
    weight backward W run `s` backwards after its B (the first s wait), the waiting ones last."""
    actions, waiting = [], []
    for a in one_f_one_b:
        actions.append(a)
        if a.op != "B":
            continue
        waiting.append(a._replace(op="W"))
        if len(waiting) > s:
            actions.append(waiting.pop(0))
    return actions + waiting


def _stage_actions(kind, s, p, m, v):
    """Stage s's actions under schedule `kind`, in its order."""
    if kind == "zero-bubble":
        return _with_weight_backwards(_stage_actions("1f1b", s, p, m, v), s)
    if kind != "interleaved":
        forwards = [Action(s, mb, "F") for mb in range(m)]
        backwards = [Action(s, mb, "B") for mb in range(m)]
        return _one_forward_one_backward(forwards, backwards,
                                         m if kind == "gpipe" else min(p - s - 1, m))
    # Megatron-LM's order: the k-th forward is of chunk (k mod p v) // p and of microbatch
    # (k // p v) p + k mod p; the backwards go through the chunks the other way.
    order = [((k % (p * v)) // p, (k // (p * v)) * p + k % p) for k in range(m * v)]
    forwards = [Action(s, mb, "F", chunk) for chunk, mb in order]
    backwards = [Action(s, mb, "B", v - 1 - chunk) for chunk, mb in order]
    warmup = m * v if m == p else min((p - s - 1) * 2 + (v - 1) * p, m * v)
    return _one_forward_one_backward(forwards, backwards, warmup)


def make_schedule(kind, stages, microbatches, chunks=1):
    """The schedule `kind` ("gpipe", "1f1b", "interleaved" with chunks >= 2 or "zero-bubble")
    of `stages` stages and `microbatches`."""
    check_sizes(kind, stages, microbatches, chunks)
    return Schedule(kind, stages, microbatches,
                    [_stage_actions(kind, s, stages, microbatches, chunks)
                     for s in range(stages)], chunks)


TimedAction = collections.namedtuple("TimedAction", ["action", "start", "end"])


class Simulation:
    """makespan; per stage busy time, idle_fraction (1 - busy / makespan) and max_in_flight (the
    most microbatch chunks whose forward has run there and whose backward (W when split) has
    not: the activations kept); timeline: every action with its times, by start (ties by
    stage): an order in which one thread can issue the whole step."""

    def __init__(self, makespan, busy, max_in_flight, timeline):
        self.makespan, self.busy = makespan, busy
        self.idle_fraction = [1 - b / makespan if makespan > 0 else 0.0 for b in busy]
        self.max_in_flight, self.timeline = max_in_flight, timeline


def _check_actions(schedule):
    """Each stage's list as Actions (plain (stage, microbatch, op[, chunk]) tuples too), after
    checking one F and one B (and one W when the schedule splits backwards) of each (virtual
    stage, microbatch) on that stage's list, in that order."""
    broken = _refusal(schedule)
    chunked = schedule.chunks > 1
    if len(schedule.per_stage) != schedule.stages:
        broken(f"{len(schedule.per_stage)} action lists for {schedule.stages} stages")
    seen, per_stage = set(), []
    for s, actions in enumerate(schedule.per_stage):
        per_stage.append([])
        for a in actions:
            if (not isinstance(a, tuple) or len(a) not in (3, 4) or a[0] != s
                    or a[2] not in ("F", "B", "W") or a[1] not in range(schedule.microbatches)
                    or Action(*a).chunk not in range(schedule.chunks)):
                broken(f"stage {s} lists {a!r}: not (stage, microbatch, 'F', 'B' or 'W'[, "
                       f"chunk]) of this stage with a microbatch and a chunk in range")
            a = Action(*a)
            per_stage[-1].append(a)
            if a in seen:
                broken(f"stage {s} runs {label(a, chunked)} twice")
            if a.op == "W" and not schedule.splits_backward:
                broken(f"stage {s} lists {label(a, chunked)}: schedule {schedule.kind} does not "
                       f"split backwards")
            if a.op == "B" and a._replace(op="F") not in seen:
                broken(f"stage {s} runs {label(a, chunked)} before its forward")
            if a.op == "W" and a._replace(op="B") not in seen:
                broken(f"stage {s} runs {label(a, chunked)} before its input backward")
            seen.add(a)
    for k in range(schedule.virtual_stages):
        for mb in range(schedule.microbatches):
            for op in schedule.ops:
                a = _on_virtual_stage(schedule, k, mb, op)
                if a not in seen:
                    broken(f"{label(a, chunked)} of stage {a.stage} is missing")
    return per_stage


def _refusal(schedule):
    """A function raising ValueError naming the schedule and its sizes, then `message`."""
    def broken(message):
        raise ValueError(f"pipeline: schedule {schedule.kind} ({schedule.stages} stages, "
                         f"{schedule.microbatches} microbatches, {schedule.chunks} chunks): "
                         f"{message}")
    return broken


def virtual_stage(schedule, action):
    """The virtual stage `action` runs: chunk * p + stage."""
    return action.chunk * schedule.stages + action.stage


def _on_virtual_stage(schedule, k, microbatch, op):
    return Action(k % schedule.stages, microbatch, op, k // schedule.stages)


def dependencies(schedule, action):
    """What `action` waits for besides its stage's previous action."""
    k, mb = virtual_stage(schedule, action), action.microbatch
    if action.op == "W":
        return [action._replace(op="B")]
    if action.op == "F":
        return [_on_virtual_stage(schedule, k - 1, mb, "F")] if k > 0 else []
    return [action._replace(op="F")] + ([_on_virtual_stage(schedule, k + 1, mb, "B")]
                                        if k + 1 < schedule.virtual_stages else [])


def simulate(schedule, forward_cost=1.0, backward_cost=2.0):
    """Runs the lists as a pipeline would: each stage its actions in order, each as soon as the
    stage is free and what it depends on has ended (transfers take no time). Costs are one
    chunk's; a split backward's B and W each take half of backward_cost."""
    per_stage = _check_actions(schedule)
    ended, timeline = {}, []
    position = [0] * schedule.stages
    free_at = [0.0] * schedule.stages
    busy = [0.0] * schedule.stages
    in_flight, max_in_flight = [0] * schedule.stages, [0] * schedule.stages
    remaining = sum(len(actions) for actions in per_stage)
    split = 0.5 if schedule.splits_backward else 1.0  # a split backward's share in B and W
    frees = "W" if schedule.splits_backward else "B"  # the activations are let go at its end
    while remaining:
        progressed = False
        for s, actions in enumerate(per_stage):
            while position[s] < len(actions):
                a = actions[position[s]]
                deps = dependencies(schedule, a)
                if any(d not in ended for d in deps):
                    break
                start = max([free_at[s]] + [ended[d] for d in deps])
                cost = forward_cost if a.op == "F" else backward_cost * split
                ended[a] = free_at[s] = start + cost
                busy[s] += cost
                in_flight[s] += 1 if a.op == "F" else -1 if a.op == frees else 0
                max_in_flight[s] = max(max_in_flight[s], in_flight[s])
                timeline.append(TimedAction(a, start, start + cost))
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            chunked, waits = schedule.chunks > 1, []
            for s, actions in enumerate(per_stage):
                if position[s] < len(actions):
                    a = actions[position[s]]
                    d = next(d for d in dependencies(schedule, a) if d not in ended)
                    waits.append(f"stage {s} at {label(a, chunked)} waits for "
                                 f"{label(d, chunked)} of stage {d.stage}")
            _refusal(schedule)(f"deadlock: {'; '.join(waits)}")
    timeline.sort(key=lambda t: (t.start, t.action.stage))
    return Simulation(max(free_at), busy, max_in_flight, timeline)
