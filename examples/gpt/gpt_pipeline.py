"""The GPT of gpt.py cut into pipeline stages, from Python (docs/pipeline.md, "From Python"; the
C++ is examples/gpt/gpt_pipeline.h).

    PYTHONPATH=build/python /usr/bin/python3 examples/gpt/gpt_pipeline.py \\
        --mesh stage=2,batch=1,model=2 --microbatches 4 --schedule 1f1b --steps 50
    ... --schedule interleaved --chunks 2          # 2 model chunks per stage
    ... --schedule zero-bubble                     # each backward as B (input) and W (weights)
    ... --one-controller                           # one controller thread, not one per stage
    mpirun -np 2 ... examples/gpt/gpt_pipeline.py --mesh stage=2,batch=1,model=1   # a stage each

The mesh is `stage x batch x model`: each stage's sub-mesh is the `batch x model` of its devices,
with gpt.py's data and tensor parallelism inside it. The model is cut into p * v virtual stages
(v = chunks, 1 unless interleaved), virtual stage k on stage k % p as its chunk k // p; the
n_layer blocks are split over them in order (the first n_layer % (p v) one more); the
embeddings live with the first, the final layer norm with the last. The tied token embedding is
also the last stage's head: a step copies it there once and sends that copy's accumulated
gradient back, added to the embedding's own (Megatron's tied-embedding all-reduce). The model
code is gpt.py's (embed, blocks, head), run piece by piece.

A step runs the microbatches in the order of a schedule (pipeline_schedule.py: gpipe, 1f1b,
interleaved or zero-bubble), issued by one thread in its simulated timeline's order or, with
stage_threads (the default when every stage is in this process), by a thread per stage in the
schedule's order (stage_threads.py: each stage relays
what it produced as soon as it is issued and waits up to the timeout for what it reads; the
losses are the single controller's bit for bit; a stage that does not send is named by its
neighbour, a stage that fails ends every other stage's wait). Tessel's ops, relayouts and tape
gradients release the GIL while C++ runs them, so a stage waiting for a transfer or its neighbour
does not hold the others; the Python between the ops holds it, so the threads issue their ops
one at a time and overlap in the devices' streams only (still 1.2-1.4x faster than one
controller on `tiny`, docs/pipeline.md, "From Python"). With measure_idle, each step measures
every stage's idle and transfers (pipeline_idle.py; the last step's in self.idle). A forward
records its virtual stage's ops on a GradientTape of its own (watching its input and its
parameters) and relays its output to the next virtual stage's sub-mesh (a relayout to the same
sharding there, pending sums reduced first); the last virtual stage computes the microbatch's mean
loss scaled by 1/m. A backward calls that tape's gradient() with the output gradient received from
the next virtual stage, lets the tape go (a stage keeps the activations of the microbatches between
their forward and backward, as the schedule says), relays its input's gradient back and adds its
parameters' to the step's sums. Zero-bubble splits it: B calls tape.backward_input for the input's
gradient only and relays it back, W later tape.backward_weight for the parameters', adds them to
the sums and lets the tape go (the C++'s backward / weight_backward). Gradient clipping uses the
norm over every stage, then one AdamW updates each parameter on its stage.

Several processes (mpirun; the mesh made by create_distributed_mesh, process_mesh()): every
process runs the same schedule; the ops of a stage whose devices are all elsewhere do nothing
there (their DTensors have no local components), and a transfer between two processes' stages
is the same relayout, across them. The loss and each stage's sum of squared gradients are relaid
out onto every stage's devices (everywhere()) before they are read, so every process reports
the same values. The step's loss (the mean of the microbatches' means) is the plain run's on the
same batch up to rounding. Dropout masks are keyed per microbatch, so with dropout they differ
from a plain run's.

Refused before the first step (ValueError naming the values): a mesh whose first dimension is not
`stage`, fewer layers than virtual stages, a batch that does not split into the microbatches, an
unknown schedule or sizes it does not take (interleaved: chunks >= 2, m a multiple of p; chunks
other than 1 with the others).
"""
import argparse
import math
import os
import re
import sys
import time

import numpy as np

import tessel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402
import pipeline_idle  # noqa: E402
import pipeline_schedule  # noqa: E402
import stage_threads  # noqa: E402

U = tessel.UNSHARDED


def stage_meshes(mesh):
    """The sub-meshes of `mesh` along its first dimension: for each of its indices, the mesh of
    the remaining dimensions over those devices."""
    if mesh.rank() < 2:
        raise ValueError(f"pipeline: a pipeline's mesh has the stage dimension first and then the "
                         f"stages' own, got {mesh.rank()} dimension(s): {mesh.to_string()}")
    ids = np.asarray(mesh.global_device_ids())
    local = dict(zip(mesh.local_device_ids(), mesh.local_devices()))
    everywhere = list(mesh.global_devices())
    out = []
    for s in range(mesh.shape()[0]):
        stage_ids = ids[s]
        flat = [int(i) for i in stage_ids.ravel()]
        local_ids = [i for i in mesh.local_device_ids() if i in flat]
        offsets = range(s * len(flat), (s + 1) * len(flat))  # row-major: stage s's block
        out.append(tessel.Mesh(mesh.dim_names[1:], stage_ids, local_ids,
                               [local[i] for i in local_ids], "",
                               [everywhere[o] for o in offsets] if everywhere else None))
    return out


class _Step:
    """A step's state: the parameters as each stage reads them (views; the last stage's wte is
    its copy), what each (virtual stage, microbatch) keeps between its forward and backward
    (work), the gradients' sums, the loss's sum and the idle meter (None: not measured)."""

    def __init__(self, params, idx, targets, dropout_seed, stages, microbatches):
        self.params, self.idx, self.targets, self.dropout_seed = params, idx, targets, dropout_seed
        self.rows = idx.shape[0] // microbatches
        self.views = [dict(params) for _ in range(stages)]
        self.work, self.sums, self.loss_sum, self.meter = {}, {}, None, None

    def on_stage(self, array, mesh, mb):
        """Microbatch mb's rows of a host array on a stage's mesh (split over batch)."""
        layout = tessel.Layout(["batch" if "batch" in mesh.dim_names else U, U], mesh)
        rows = slice(mb * self.rows, (mb + 1) * self.rows)
        return tessel.copy_to_mesh(np.ascontiguousarray(array[rows]), layout)


class GptPipeline:
    """gpt.py's model on a `stage x batch x model` mesh, run by a schedule of `microbatches`
    (and `chunks` model chunks per stage: interleaved). timeout: the deadline in seconds of each
    transfer between stages (the relayout's) and of a stage thread's wait; before_action: called
    with each Action of a step before it runs (tracing; the tests stall a stage there; with
    stage threads, from the stage's thread). stage_threads: None (the default) a controller
    thread per stage when every device of the mesh is in this process and there are 2 stages or
    more, else one controller, as the C++ pipeline's kAuto (measured 1.2-1.4x faster than one
    controller on `tiny`: docs/pipeline.md, "From Python"); True a thread per stage
    (one process only: ValueError when some of the mesh's devices are elsewhere); False one
    controller (whose before_action sees the schedule's order). measure_idle:
    gradients() measures each stage's idle and transfers (self.idle, pipeline_idle.py)."""

    def __init__(self, config, mesh, schedule="1f1b", microbatches=1, timeout=60.0,
                 before_action=None, chunks=1, stage_threads=None, measure_idle=False):
        if mesh.rank() < 2 or mesh.dim_names[0] != "stage":
            raise ValueError(f"pipeline: the pipeline's mesh must have `stage` as its first "
                             f"dimension (e.g. stage=2,batch=1,model=2), got dimensions "
                             f"{list(mesh.dim_names)}")
        if not timeout > 0:
            raise ValueError(f"pipeline: the transfers' timeout must be > 0 seconds, got {timeout}")
        p = mesh.dim_size("stage")
        if stage_threads is None:
            stage_threads = mesh.num_local_devices() == mesh.size
        if stage_threads and mesh.num_local_devices() != mesh.size:
            raise ValueError(f"pipeline: stage threads run every stage in this process; "
                             f"{mesh.num_local_devices()} of the mesh's {mesh.size} devices are "
                             f"here")
        self.schedule = pipeline_schedule.make_schedule(schedule, p, microbatches, chunks)
        if config.n_layer < p * chunks:
            raise ValueError(f"pipeline: {config.n_layer} layers do not fill {p * chunks} "
                             f"virtual stages ({p} stages x {chunks} chunks): each needs at "
                             f"least one layer")
        if config.batch_size % microbatches != 0:
            raise ValueError(f"pipeline: the batch of {config.batch_size} rows does not split "
                             f"into {microbatches} microbatches of equal size")
        self.order = pipeline_schedule.simulate(self.schedule).timeline
        self.config, self.mesh, self.timeout = config, mesh, timeout
        self.before_action = before_action
        self.stage_threads, self.measure_idle = stage_threads and p > 1, measure_idle
        self.idle = None  # the last step's PipelineIdle, with measure_idle
        self.meshes = stage_meshes(mesh)
        self.names = [n for n, *_ in gpt.parameter_specs(config, self.meshes[0].dim_names)]

    @property
    def stages(self):
        return self.schedule.stages

    @property
    def microbatches(self):
        return self.schedule.microbatches

    @property
    def virtual_stages(self):
        return self.schedule.virtual_stages

    def virtual_stage(self, action):
        """The virtual stage an Action of the schedule runs: chunk * p + stage."""
        return pipeline_schedule.virtual_stage(self.schedule, action)

    def layers(self, k):
        """The blocks of virtual stage k (with one chunk, stage k): the first n_layer % (p v)
        virtual stages one more."""
        base, extra = divmod(self.config.n_layer, self.virtual_stages)
        first = k * base + min(k, extra)
        return range(first, first + base + (1 if k < extra else 0))

    def stage_of(self, name):
        """The stage parameter `name` lives on."""
        if name in ("wte", "wpe"):
            return 0
        if name == "ln_f.weight":
            return self.stages - 1
        layer = int(name.split(".")[1])  # h.<layer>.<...>
        k = next(k for k in range(self.virtual_stages) if layer in self.layers(k))
        return k % self.stages

    def used_by(self, k):
        """The parameters virtual stage k reads, in gpt.py's order: the first the embeddings,
        the last the final norm and (unless it is the first) the tied wte."""
        last = self.virtual_stages - 1
        return [n for n in self.names
                if (n in ("wte", "wpe") and k == 0) or (n == "ln_f.weight" and k == last) or
                (n == "wte" and k == last) or
                (n.startswith("h.") and int(n.split(".")[1]) in self.layers(k))]

    def init(self, seed):
        """gpt.init's values (keyed by seed, parameter and global index: the plain run's), each
        parameter made on its own stage only; a dict in gpt.py's order."""
        made = {}
        for s, mesh in enumerate(self.meshes):
            made.update(gpt.init(self.config, mesh, seed,
                                 names={n for n in self.names if self.stage_of(n) == s}))
        return {n: made[n] for n in self.names}

    def transfer(self, x, to, what):
        """x on stage `to`'s sub-mesh, its sharding kept and pending sums reduced. A failure keeps
        its class (DeadlineExceededError past self.timeout) and names `what`, both stages and the
        late one (whose devices the relayout's error says it waited for)."""
        layout = tessel.fetch_layout(x)
        target = self.meshes[to]
        if layout.mesh == target:
            return x
        try:
            return tessel.relayout(x, tessel.Layout(layout.sharding_specs, target), self.timeout)
        except tessel.Error as e:
            source = self.stage_of_mesh(layout.mesh)
            cause = str(e)
            waited = cause.find("for ranks [")
            named = cause[waited:cause.find("]", waited)] if waited >= 0 else cause
            late = [s for s in (source, to)
                    if any(re.search(re.escape(d) + r"(?!\d)", named)
                           for d in self.meshes[s].global_devices() or
                           self.meshes[s].local_devices())]
            who = (f"stage {late[0]} is late" if len(late) == 1 else
                   f"stages {source} and {to} named" if late else "no stage named")
            raise type(e)(f"pipeline: {what} from stage {source} to stage {to} did not arrive "
                          f"within {self.timeout * 1000:.0f} ms ({who}): {cause}") from e

    def everywhere(self, x):
        """`x` (a value on one stage) on every stage's devices, its sharding kept: what every
        process can read when the stages are on different processes (the loss, the norm)."""
        layout = tessel.Layout(tessel.fetch_layout(x).sharding_specs, self.mesh)
        return tessel.relayout(x, layout, self.timeout)

    def read(self, x):
        """The float value of scalar `x` (on one stage), the same on every process."""
        return float(np.asarray(tessel.to_host(self.everywhere(x))))

    def gradients(self, params, idx, targets, dropout_seed=None):
        """(the step's loss, {name: gradient}) of host token ids and targets [B, T] through the
        schedule; each gradient in its parameter's layout on its stage. With measure_idle,
        self.idle is then the step's PipelineIdle (pipeline_idle.py)."""
        idx, targets = np.asarray(idx), np.asarray(targets)
        self.check(params, idx, targets)
        st = _Step(params, idx, targets, dropout_seed, self.stages, self.microbatches)
        if self.measure_idle:
            st.meter = pipeline_idle.IdleMeter(self.local_stage_devices(), self.timeout)
        if self.stage_threads:
            self.copy_wte(st)  # before the threads start (the C++'s order)
            self.run_stage_threads(st)
        else:
            self.run_one_controller(st)
        if "wte copy" in st.sums:  # the head's share of the tied embedding's gradient
            st.sums["wte"] = st.sums["wte"] + self.move(st, st.sums.pop("wte copy"), 0,
                                                        "the tied token embedding's gradient")
        if st.meter is not None:
            self.idle = st.meter.finish()
        return self.read(st.loss_sum) / self.microbatches, {n: st.sums[n] for n in self.names}

    def run_one_controller(self, st):
        """Every action from this thread, in the simulated timeline's order: a forward fetches
        its input from the previous virtual stage, a backward sends its input's gradient back."""
        p, last_k = self.stages, self.virtual_stages - 1
        for timed in self.order:
            s, mb, op, _ = timed.action
            k = self.virtual_stage(timed.action)
            if self.before_action is not None:
                self.before_action(timed.action)
            if op == "F":
                received = None
                if k > 0:
                    received = self.move(st, st.work[k - 1, mb]["output"], s,
                                         f"the forward activation of microbatch {mb}")
                if k == last_k:
                    self.copy_wte(st)
                self.forward(st, timed.action, received)
            elif op == "W":
                self.weight_backward(st, timed.action)
            else:
                grad = self.backward(st, timed.action, st.work[k, mb].get("output_gradient"))
                if k > 0:
                    st.work[k - 1, mb]["output_gradient"] = self.move(
                        st, grad, (k - 1) % p, f"the backward gradient of microbatch {mb}")

    def run_stage_threads(self, st):
        """Each stage's actions on a thread of its own, in the schedule's order (stage_threads.py):
        a stage sends what its action produced to the neighbouring stage as soon as it is issued
        and waits up to self.timeout for what its action reads; a stage that does not send is
        named (DeadlineExceededError), and a failed stage ends every other stage's wait. Each
        thread runs its actions in a RelayoutTimeoutScope of self.timeout (as the C++'s stages
        do): a launch that waits for room on a stalled device's stream, or a collective inside
        the stage, gives up by the same deadline and names the device."""
        p, last_k = self.stages, self.virtual_stages - 1
        mail = stage_threads.Mailbox()
        ms = f"{self.timeout * 1000:.0f}"

        def stage(s):
            with tessel.RelayoutTimeoutScope(self.timeout):
                run_actions(s)

        def run_actions(s):
            for action in self.schedule.per_stage[s]:
                if mail.failed:
                    return
                if self.before_action is not None:
                    self.before_action(action)
                _, mb, op, _ = action
                if op == "W":  # local: nothing moves
                    self.weight_backward(st, action)
                    continue
                k = self.virtual_stage(action)
                forward = op == "F"
                received = None
                if k > 0 if forward else k < last_k:
                    source = (k - 1) % p if forward else (k + 1) % p
                    what = (f"the {'forward activation' if forward else 'backward gradient'} of "
                            f"microbatch {mb}")
                    received = mail.take(
                        (op, k, mb), self.timeout,
                        lambda: (f"pipeline: {what} from stage {source} to stage {s} did not "
                                 f"arrive within {ms} ms (stage {source} is late): it was not "
                                 f"sent"))
                    if received is None:
                        return  # another stage failed: its error ends the step
                if forward:
                    out = self.forward(st, action, received)
                    if k < last_k:
                        mail.put(("F", k + 1, mb), self.move(
                            st, out, (k + 1) % p, f"the forward activation of microbatch {mb}"))
                    continue
                grad = self.backward(st, action, received)
                if k > 0:
                    mail.put(("B", k - 1, mb), self.move(
                        st, grad, (k - 1) % p, f"the backward gradient of microbatch {mb}"))

        stage_threads.run([lambda s=s: stage(s) for s in range(p)], mail)

    def copy_wte(self, st):
        """The last stage's copy of the tied embedding (its head), made once a step."""
        view = st.views[-1]
        if self.stages > 1 and view["wte"] is st.params["wte"]:
            view["wte"] = self.move(st, st.params["wte"], self.stages - 1,
                                    "the tied token embedding")

    def forward(self, st, action, received):
        """Action `action`'s forward on `received` (None for the first virtual stage): its tape
        recorded, its output kept in st.work and returned; the last virtual stage adds its
        microbatch's loss to the step's."""
        s, mb, _, _ = action
        k, last_k = self.virtual_stage(action), self.virtual_stages - 1
        view, used = st.views[s], self.used_by(k)
        seed = None if st.dropout_seed is None else st.dropout_seed * 1009 + mb
        w = st.work[k, mb] = {"tape": tessel.GradientTape()}
        if k > 0:
            w["input"] = received
        with w["tape"] as tape:
            if k > 0:
                tape.watch(w["input"])
            tape.watch([view[n] for n in used])
            x = (gpt.embed(view, st.on_stage(st.idx, self.meshes[0], mb), self.config, seed)
                 if k == 0 else w["input"])
            x = gpt.blocks(view, x, self.config, self.layers(k), seed)
            if k == last_k:
                loss = gpt.cross_entropy(gpt.head(view, x, self.config),
                                         st.on_stage(st.targets, self.meshes[-1], mb))
                st.loss_sum = loss if st.loss_sum is None else st.loss_sum + loss
                x = loss * (1.0 / self.microbatches)
        w["output"] = x
        return x

    def backward(self, st, action, output_gradient):
        """Action `action`'s backward given its output's gradient (None for the last virtual
        stage): the parameters' gradients added to st.sums (zero-bubble's B: only the input's,
        the parameters' wait on the tape for W), the input's gradient returned (None for the
        first virtual stage)."""
        s, mb, _, _ = action
        k = self.virtual_stage(action)
        w, weights = st.work[k, mb], [st.views[s][n] for n in self.used_by(k)]
        inputs = [w["input"]] if k > 0 else []
        if self.schedule.splits_backward:  # B: the input's half; the weights' wait for W
            grads = w["tape"].backward_input(w["output"], inputs, output_gradients=output_gradient)
            st.work[k, mb] = {"tape": w["tape"]}  # it keeps what the weights' gradients read
        else:
            del st.work[k, mb]  # the activations kept for this microbatch are let go after
            grads = w["tape"].gradient(w["output"], inputs + weights, output_gradient)
        input_gradient = grads.pop(0) if k > 0 else None
        self.add_to_sums(st.sums, k, grads)  # none for B
        return input_gradient

    def weight_backward(self, st, action):
        """Zero-bubble's W: the parameters' gradients from the microbatch's tape, added to
        st.sums; the activations it kept let go."""
        s, mb, _, _ = action
        k = self.virtual_stage(action)
        w = st.work.pop((k, mb))
        self.add_to_sums(st.sums, k,
                         w["tape"].backward_weight([st.views[s][n] for n in self.used_by(k)]))

    def move(self, st, x, to, what):
        """transfer(), timed by the step's meter when it measures the idle."""
        if st.meter is None:
            return self.transfer(x, to, what)
        source = self.stage_of_mesh(tessel.fetch_layout(x).mesh)
        if source == to:
            return x
        return st.meter.transfer(source, to, lambda: self.transfer(x, to, what))

    def idle_everywhere(self, idle):
        """Each stage's figures of `idle` (gradients()' self.idle) as the process holding the
        stage measured them, on every process, and each stage's transfer time recomputed from
        every process's transfer log (pipeline_idle.shorter_sides); the wall time, the log and
        the transfer count stay this process's. A collective when the mesh spans processes
        (every process calls it, in the same order as its other collectives: one relayout per
        stage); in one process `idle` itself (the C++'s GptPipeline::idle_everywhere)."""
        if self.mesh.num_local_devices() == self.mesh.size:
            return idle
        if len(idle.stages) != self.stages:
            raise ValueError(f"pipeline: idle_everywhere needs one figure per stage ({self.stages}"
                             f"), got {len(idle.stages)}")
        rows = []
        for s, mesh in enumerate(self.meshes):  # the holder's figures, then its log's seconds
            mine = idle.stages[s]
            row = [mine.devices, mine.computing_seconds, mine.communication_seconds]
            row += [seconds for _, _, seconds in idle.log]
            x = tessel.copy_to_mesh(np.asarray(row, np.float64), tessel.Layout([U], mesh))
            rows.append(np.asarray(tessel.to_host(self.everywhere(x))))
        logs = [[(f, t, float(r[3 + i])) for i, (f, t, _) in enumerate(idle.log)] for r in rows]
        transfers = pipeline_idle.shorter_sides(logs)
        wall = idle.wall_seconds
        stages = [pipeline_idle.StageIdle(int(r[0]), float(r[1]), float(r[2]), transfers[s],
                                          1 - float(r[1]) / wall if r[0] > 0 else 0.0,
                                          transfers[s] / wall)
                  for s, r in enumerate(rows)]
        return idle._replace(stages=stages)

    def stage_of_mesh(self, mesh):
        return next(s for s, m in enumerate(self.meshes) if m == mesh)

    def local_stage_devices(self):
        """Each stage's devices of this process (the idle meter's view)."""
        runtime = tessel.Runtime.global_runtime()
        return [[runtime.device(name) for name in mesh.local_devices()] for mesh in self.meshes]

    def add_to_sums(self, sums, k, grads):
        """Adds virtual stage k's parameter gradients (in used_by(k)'s order) to the step's
        `sums`; the last virtual stage's share of the tied wte under "wte copy"."""
        for name, g in zip(self.used_by(k), grads):
            key = "wte copy" if name == "wte" and k != 0 else name
            sums[key] = sums[key] + g if key in sums else g

    def clip_by_global_norm(self, grads, clip_norm):
        """({name: gradient scaled to a global norm of at most clip_norm}, that norm): each
        stage's sum of squares where its gradients live, read on every process (everywhere())
        and summed on the host (tessel.clip_by_global_norm's scale, clip_norm / max(norm,
        clip_norm))."""
        if not (clip_norm > 0 and math.isfinite(clip_norm)):
            raise ValueError(f"pipeline: clip_norm must be a finite number > 0, got {clip_norm}")
        squares = 0.0
        for s in range(self.stages):
            on_stage = [tessel.reduce_sum(tessel.square(grads[n])) for n in self.names
                        if self.stage_of(n) == s]
            total = on_stage[0]
            for term in on_stage[1:]:
                total = total + term
            squares += self.read(total)
        norm = math.sqrt(squares)
        scale = clip_norm / max(norm, clip_norm)
        return {n: g * scale if scale < 1 else g for n, g in grads.items()}, norm

    def check(self, params, idx, targets):
        """The parameters by name and host token ids and targets [B, T] (numpy), B a multiple
        of the microbatches; else ValueError naming them."""
        if sorted(params) != sorted(self.names):
            raise ValueError(f"pipeline: parameters {sorted(set(params) ^ set(self.names))} "
                             f"missing or unknown")
        if (idx.ndim != 2 or idx.shape != targets.shape or
                idx.shape[0] % self.microbatches != 0):
            raise ValueError(f"pipeline: token ids {list(idx.shape)} and targets "
                             f"{list(targets.shape)} must be [B, T] with B a multiple of the "
                             f"{self.microbatches} microbatches")


class Trainer(gpt.Trainer):
    """gpt.Trainer's AdamW, learning-rate schedule and clipping, on a GptPipeline: step() takes
    host token ids and targets [B, T]."""

    def __init__(self, pipeline, params):
        super().__init__(params, pipeline.config)
        self.pipeline = pipeline

    def step(self, idx, targets):
        self.optimizer.learning_rate = self.schedule(self.step_count)
        value, grads = self.pipeline.gradients(dict(zip(self.names, self.params)), idx, targets,
                                               7919 + self.step_count)
        clipped, _ = self.pipeline.clip_by_global_norm(grads, self.config.grad_clip)
        self.params = self.optimizer.apply(self.params, [clipped[n] for n in self.names])
        self.step_count += 1
        return value


def process_mesh(text):
    """The mesh of `text` ("stage=2,batch=1,model=2"): alone, over this process's devices; under
    mpirun (tessel.client_config().num_clients > 1; call it after tessel.MpiEnvironment()),
    create_distributed_mesh's over every process's devices, each process holding an equal share
    in row-major order (-np 2 with stage=2: a stage each). Devices that do not split evenly over
    the processes: ValueError naming the counts."""
    mesh = tessel.parse_mesh(text)  # more than 4 devices in one process: TESSEL_CPU_DEVICES=8
    processes = tessel.client_config().num_clients
    if processes == 1:
        return mesh
    if mesh.size % processes != 0:
        raise ValueError(f"pipeline: the mesh {text}'s {mesh.size} devices do not split evenly "
                         f"over {processes} processes")
    return tessel.create_distributed_mesh(
        list(zip(mesh.dim_names, mesh.shape())),
        local_devices=[f"CPU:{i}" for i in range(mesh.size // processes)])


def main(argv=None):
    """Trains the pipelined GPT on tiny Shakespeare, as gpt.py's main; under mpirun the first
    process prints (every process computes the same losses)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--mesh", default="stage=2,batch=1,model=2", help="stage x batch x model")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--schedule", default="1f1b", choices=pipeline_schedule.KINDS)
    parser.add_argument("--chunks", type=int, default=None,
                        help="model chunks per stage (interleaved: default 2; else 1)")
    parser.add_argument("--layers", type=int, default=None,
                        help="the number of transformer blocks (default: the config's)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--print-schedule", action="store_true",
                        help="print the schedule and its simulation, then exit")
    parser.add_argument("--recompute", default="none", choices=["none", "selective", "full"])
    parser.add_argument("--fsdp", action="store_true",
                        help="parameters sharded over each stage's batch (ZeRO-3)")
    controllers = parser.add_mutually_exclusive_group()
    controllers.add_argument("--stage-threads", action="store_true",
                             help="a controller thread per stage (one process only; the default "
                                  "when every stage is in this process)")
    controllers.add_argument("--one-controller", action="store_true",
                             help="one controller thread for the whole step")
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                       "data", "shakespeare_char", "input.txt"))
    args = parser.parse_args(argv)
    # Under mpirun, MPI for the whole run (MPI_Finalize once it has ended).
    mpi = tessel.MpiEnvironment() if tessel.client_config().num_clients > 1 else None
    status = train(args)
    del mpi
    return status


def train(args):
    """main()'s run of its parsed arguments."""
    config = gpt.Config(args.config)
    config.recompute, config.fsdp = args.recompute, args.fsdp
    if args.layers is not None:
        config.n_layer = args.layers
    config.lr_decay_iters = args.steps
    config.warmup_iters = min(config.warmup_iters, args.steps // 10)
    chunks = args.chunks if args.chunks is not None else 2 if args.schedule == "interleaved" else 1
    say = print if tessel.client_config().client_id == 0 else lambda *a, **k: None
    pipeline = GptPipeline(config, process_mesh(args.mesh), args.schedule, args.microbatches,
                           chunks=chunks,
                           stage_threads=(True if args.stage_threads else
                                          False if args.one_controller else None))
    say(pipeline.schedule, flush=True)
    last = pipeline.virtual_stages - 1
    for k in range(pipeline.virtual_stages):
        layers = pipeline.layers(k)
        where = (f"virtual stage {k} (stage {k % pipeline.stages}, chunk {k // pipeline.stages})"
                 if chunks > 1 else f"stage {k}")
        say(f"{where}: layers {layers.start}..{layers.stop - 1}"
            f"{', embeddings' if k == 0 else ''}{', final norm and head' if k == last else ''}")
    if args.print_schedule:
        return 0
    text = open(args.data).read()
    chars = sorted(set(text))
    ids = np.array([chars.index(ch) for ch in text[: int(len(text) * 0.9)]], dtype=np.int32)
    rng = np.random.default_rng(1337)  # the same batches on every process
    trainer = Trainer(pipeline, pipeline.init(1337))
    start = time.time()
    for s in range(args.steps):
        offsets = rng.integers(0, len(ids) - config.block_size - 1, config.batch_size)
        x = np.stack([ids[o:o + config.block_size] for o in offsets])
        y = np.stack([ids[o + 1:o + 1 + config.block_size] for o in offsets])
        value = trainer.step(x, y)
        if s % 20 == 0 or s == args.steps - 1:
            say(f"step {s:4d} loss {value:.4f} ({time.time() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
