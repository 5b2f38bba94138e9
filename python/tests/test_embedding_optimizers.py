"""Every embedding optimizer and option against a NumPy reference of TF's update formulas.

The reference (float64, whole tables) applies TF's formulas to the rows each step touched:
training_ops' ApplyMomentum, ApplyRMSProp, ApplyCenteredRMSProp, ApplyFtrlV2 (with beta and
multiply_linear_by_lr), ApplyProximalAdagrad, ApplyAdadelta, Adam without bias correction
(lazy, or non-lazy: every row's moments decay each step), with TF's TPU embedding options
around the update: gradient clipping, decoupled weight decay, weight clipping, and dynamic
learning rates fed per step by tag, and gradient accumulation disabled (each device's gradient
applied in turn). 100 steps on 4 devices, row-wise (DIV and MOD),
column-wise and table-wise tables. The lookup side of the reference is test_embedding's.
"""

import numpy as np
import pytest

import tessel
from test_embedding import DenseReference, mesh_of, random_bags

E = tessel.EmbeddingOptimizer
P = tessel.TablePlacement
S = tessel.ShardingStrategy
C = tessel.EmbeddingCombiner

SLOTS = {
    E.SGD: [], E.ADAGRAD: ["accumulators"], E.ADAM: ["momenta", "velocities"],
    E.MOMENTUM: ["momenta"], E.RMS_PROP: ["ms", "mom"], E.CENTERED_RMS_PROP: ["ms", "mom", "mg"],
    E.FTRL: ["accumulators", "linears"], E.PROXIMAL_ADAGRAD: ["accumulators"],
    E.ADADELTA: ["accumulators", "updates"], E.PROXIMAL_YOGI: ["v", "m"],
}


def tf_update(o, lr, w, s, g):
    """TF's update of rows w (slots s: dict name -> rows) with gradient g, in place."""
    g = np.clip(g, o.clip_gradient_min, o.clip_gradient_max)
    if o.weight_decay_factor:
        w -= o.weight_decay_factor * (lr if o.multiply_weight_decay_factor_by_learning_rate
                                      else 1.0) * w
    k = o.optimizer
    if k == E.SGD:
        w -= lr * g
    elif k == E.ADAGRAD:
        s["accumulators"] += g * g
        w -= lr * g / np.sqrt(s["accumulators"])
    elif k == E.ADAM:
        m, v = s["momenta"], s["velocities"]
        m[:] = o.beta1 * m + (1 - o.beta1) * g
        v[:] = o.beta2 * v + (1 - o.beta2) * g * g
        denom = np.sqrt(v + o.epsilon ** 2) if o.use_sum_inside_sqrt else np.sqrt(v) + o.epsilon
        w -= lr * m / denom
    elif k == E.MOMENTUM:
        m = s["momenta"]
        m[:] = o.momentum * m + g
        w -= lr * (g + o.momentum * m) if o.use_nesterov else lr * m
    elif k in (E.RMS_PROP, E.CENTERED_RMS_PROP):
        ms, mom = s["ms"], s["mom"]
        ms[:] = o.rho * ms + (1 - o.rho) * g * g
        denom = ms + o.epsilon
        if k == E.CENTERED_RMS_PROP:
            s["mg"][:] = o.rho * s["mg"] + (1 - o.rho) * g
            denom = denom - s["mg"] ** 2
        mom[:] = o.momentum * mom + lr * g / np.sqrt(denom)
        w -= mom
    elif k == E.FTRL:
        acc, lin = s["accumulators"], s["linears"]
        p = -o.learning_rate_power
        new_acc = acc + g * g
        sigma = new_acc ** p - acc ** p
        l1, l2 = o.l1_regularization_strength, o.l2_regularization_strength
        if o.multiply_linear_by_learning_rate:
            lin += g * lr - sigma * w
            quadratic = new_acc ** p + o.beta + 2 * l2 * lr
            l1 = l1 * lr
        else:
            lin += g - sigma / lr * w
            quadratic = (new_acc ** p + o.beta) / lr + 2 * l2
        acc[:] = new_acc
        w[:] = np.where(np.abs(lin) > l1, (np.sign(lin) * l1 - lin) / quadratic, 0.0)
    elif k == E.PROXIMAL_ADAGRAD:
        acc = s["accumulators"]
        acc += g * g
        rate = lr / np.sqrt(acc)
        prox = w - rate * g
        w[:] = (np.sign(prox) * np.maximum(np.abs(prox) - rate * o.l1_regularization_strength, 0)
                / (1 + rate * o.l2_regularization_strength))
    elif k == E.PROXIMAL_YOGI:  # Zaheer et al.'s Yogi with the proximal l1 / l2 step
        v, m = s["v"], s["m"]
        m[:] = o.beta1 * m + (1 - o.beta1) * g
        v -= (1 - o.beta2) * np.sign(v - g * g) * g * g
        rate = lr / (np.sqrt(v) + o.epsilon)
        stepped = w - rate * m
        w[:] = (np.sign(stepped) * np.maximum(np.abs(stepped) - rate * o.l1_regularization_strength,
                                              0) / (1 + rate * o.l2_regularization_strength))
    elif k == E.ADADELTA:
        acc, upd = s["accumulators"], s["updates"]
        acc[:] = o.rho * acc + (1 - o.rho) * g * g
        update = np.sqrt(upd + o.epsilon) / np.sqrt(acc + o.epsilon) * g
        w -= lr * update
        upd[:] = o.rho * upd + (1 - o.rho) * update * update
    w[:] = np.clip(w, o.clip_weight_min, o.clip_weight_max)


class OptimizerReference(DenseReference):
    """test_embedding's dense tables and lookups; TF's formulas for the updates."""

    def __init__(self, cfg, tables):
        super().__init__(cfg, tables)
        self.slots = []
        for t, desc in zip(self.tables, cfg.tables):
            o = desc.optimization_parameters
            starts = {"accumulators": o.initial_accumulator, "v": o.initial_accumulator}
            if o.optimizer not in (E.ADAGRAD, E.FTRL, E.PROXIMAL_ADAGRAD, E.PROXIMAL_YOGI):
                starts = {}
            self.slots.append({name: np.full_like(t, starts.get(name, 0.0))
                               for name in SLOTS[o.optimizer]})

    def update(self, t, rows, lr, g):
        o = self.cfg.tables[t].optimization_parameters
        w = self.tables[t][rows]
        s = {name: slot[rows] for name, slot in self.slots[t].items()}
        tf_update(o, lr, w, s, g)
        self.tables[t][rows] = w
        for name, rows_of_slot in s.items():
            self.slots[t][name][rows] = rows_of_slot

    def apply(self, device_sums, learning_rates=()):
        """device_sums: each device's sums (row_gradients), in device order. A table with
        gradient accumulation updates each touched row once with the devices' total; without,
        each device's gradient updates the rows it touched, device after device."""
        n = len(self.tables)
        for t, desc in enumerate(self.cfg.tables):
            o = desc.optimization_parameters
            lr = (o.learning_rate if o.dynamic_learning_rate_tag < 0
                  else learning_rates[o.dynamic_learning_rate_tag])
            touched = np.logical_or.reduce([sums[t + n] for sums in device_sums])
            if o.gradient_accumulation:
                pieces = [(np.nonzero(touched)[0], sum(sums[t] for sums in device_sums))]
            else:
                pieces = [(np.nonzero(sums[t + n])[0], sums[t]) for sums in device_sums]
            if o.optimizer == E.ADAM and not o.lazy_adam:  # untouched rows: gradient 0, once
                pieces.append((np.nonzero(~touched)[0], np.zeros_like(self.tables[t])))
            for rows, g in pieces:
                self.update(t, rows, lr, g[rows])


def optimizer_config(placement, strategy, big, small):
    tables = [tessel.TableDescriptor("big", 41, 5, big, placement, C.MEAN),
              tessel.TableDescriptor("small", 7, 3, small, placement, C.SQRTN)]
    features = [tessel.FeatureDescriptor("a", 0), tessel.FeatureDescriptor("b", 1),
                tessel.FeatureDescriptor("c", 0)]
    return tessel.EmbeddingConfiguration(tables, features, tessel.EmbeddingMode.TRAINING, 4,
                                         strategy)


def train_and_compare(cfg, steps=100, learning_rates=lambda step: [], n=4, seed=0, tol=2e-5):
    emb = tessel.ShardedEmbedding(cfg, mesh_of(n), seed=seed + 1, timeout=30)
    ref = OptimizerReference(cfg, [np.asarray(emb.get_table(t.name)) for t in cfg.tables])
    rng = np.random.default_rng(seed)
    for step in range(steps):
        inputs, grads, device_sums = [], [], [ref.new_sums() for _ in range(n)]
        for fi, f in enumerate(cfg.features):
            table = cfg.tables[f.table_id]
            bags = [random_bags(rng, table.vocabulary_size, 4, True) for _ in range(n)]
            inputs.append([tessel.RaggedIds(*b) for b in bags])
            grads.append([rng.standard_normal((4, table.dimension)).astype(np.float32)
                          for _ in bags])
            for (ids, splits, weights), g, sums in zip(bags, grads[-1], device_sums):
                ref.row_gradients(fi, ids, splits, weights, g.astype(np.float64), sums)
        emb.lookup(inputs)
        rates = learning_rates(step)
        emb.apply_gradients(grads, rates)
        ref.apply(device_sums, rates)
    for t, desc in enumerate(cfg.tables):
        np.testing.assert_allclose(np.asarray(emb.get_table(desc.name)), ref.tables[t],
                                   rtol=tol, atol=tol, err_msg=desc.name)
        assert emb.slot_names(desc.name) == list(ref.slots[t])
        for name, want in ref.slots[t].items():
            np.testing.assert_allclose(np.asarray(emb.get_slot(desc.name, name)), want,
                                       rtol=tol, atol=tol, err_msg=f"{desc.name} {name}")
    return emb, ref


# Each optimizer with TF-like hyper-parameters (and a variant of each flag).
OPTIMIZERS = {
    "momentum": dict(optimizer=E.MOMENTUM, learning_rate=0.05, momentum=0.9),
    "nesterov": dict(optimizer=E.MOMENTUM, learning_rate=0.05, momentum=0.8, use_nesterov=True),
    "rms_prop": dict(optimizer=E.RMS_PROP, learning_rate=0.01, rho=0.9, momentum=0.5,
                     epsilon=1e-3),
    "centered_rms_prop": dict(optimizer=E.CENTERED_RMS_PROP, learning_rate=0.01, rho=0.9,
                              momentum=0.3, epsilon=1e-2),
    "ftrl": dict(optimizer=E.FTRL, learning_rate=0.2, learning_rate_power=-0.5,
                 initial_accumulator=0.1, l1_regularization_strength=0.01,
                 l2_regularization_strength=0.02, beta=0.5),
    "ftrl_linear_by_lr": dict(optimizer=E.FTRL, learning_rate=0.3, learning_rate_power=-0.3,
                              initial_accumulator=0.2, l1_regularization_strength=0.02,
                              multiply_linear_by_learning_rate=True),
    "adam_non_lazy": dict(optimizer=E.ADAM, learning_rate=0.01, beta1=0.8, beta2=0.9,
                          epsilon=1e-3, lazy_adam=False),
    "adam_non_lazy_sum_inside_sqrt": dict(optimizer=E.ADAM, learning_rate=0.01, beta1=0.8,
                                          beta2=0.9, epsilon=1e-3, lazy_adam=False,
                                          use_sum_inside_sqrt=True),
    "proximal_adagrad": dict(optimizer=E.PROXIMAL_ADAGRAD, learning_rate=0.1,
                             initial_accumulator=0.1, l1_regularization_strength=0.01,
                             l2_regularization_strength=0.05),
    "adadelta": dict(optimizer=E.ADADELTA, learning_rate=1.0, rho=0.95, epsilon=1e-3),
    "proximal_yogi": dict(optimizer=E.PROXIMAL_YOGI, learning_rate=0.05, beta1=0.8, beta2=0.9,
                          epsilon=1e-3, initial_accumulator=1e-6,
                          l1_regularization_strength=0.01, l2_regularization_strength=0.05),
}

PLACEMENTS = [(P.ROW_WISE, S.DIV_DEFAULT), (P.ROW_WISE, S.MOD), (P.COLUMN_WISE, S.MOD),
              (P.TABLE_WISE, S.DIV_DEFAULT)]


@pytest.mark.parametrize("placement,strategy", PLACEMENTS)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_matches_tf_formula_for_100_steps(name, placement, strategy):
    o = tessel.OptimizationParameters(**OPTIMIZERS[name])
    train_and_compare(optimizer_config(placement, strategy, o, o))


# The options, on optimizers TF users combine them with.
OPTIONS = {
    "gradient_clipping": dict(clip_gradient_min=-0.3, clip_gradient_max=0.5),
    "weight_clipping": dict(clip_weight_min=-0.35, clip_weight_max=0.3),
    "weight_decay": dict(weight_decay_factor=0.01),
    "weight_decay_by_lr": dict(weight_decay_factor=0.2,
                               multiply_weight_decay_factor_by_learning_rate=True),
    "all": dict(clip_gradient_min=-0.4, clip_gradient_max=0.4, clip_weight_min=-0.4,
                clip_weight_max=0.35, weight_decay_factor=0.02),
}


@pytest.mark.parametrize("placement,strategy", PLACEMENTS[1:])
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "momentum", "ftrl", "adam_non_lazy"])
def test_options_match_tf_for_100_steps(optimizer, option, placement, strategy):
    base = dict(OPTIMIZERS.get(optimizer, {}))
    if optimizer in ("sgd", "adagrad"):
        base = dict(optimizer=E.SGD if optimizer == "sgd" else E.ADAGRAD, learning_rate=0.2)
    o = tessel.OptimizationParameters(**base, **OPTIONS[option])
    plain = tessel.OptimizationParameters(**base)
    emb, _ = train_and_compare(optimizer_config(placement, strategy, o, plain))
    if "weight_clipping" in option or option == "all":
        table = np.asarray(emb.get_table("big"))
        assert table.min() >= o.clip_weight_min and table.max() <= o.clip_weight_max


@pytest.mark.parametrize("placement,strategy", PLACEMENTS)
@pytest.mark.parametrize("optimizer", ["adagrad", "ftrl", "adam_non_lazy", "rms_prop"])
def test_gradient_accumulation_disabled_applies_each_devices_gradient_in_turn(
        optimizer, placement, strategy):
    """TF's gradient_accumulation_status DISABLED: each device's gradient of a row updates it
    in turn, in device order (the reference applies the four devices' sums one after the
    other); the plain table beside it keeps accumulating. With clipping and weight decay."""
    base = (dict(optimizer=E.ADAGRAD, learning_rate=0.2) if optimizer == "adagrad"
            else dict(OPTIMIZERS[optimizer]))
    o = tessel.OptimizationParameters(**base, **OPTIONS["all"], gradient_accumulation=False)
    assert not o.gradient_accumulation
    train_and_compare(optimizer_config(placement, strategy, o, tessel.OptimizationParameters(
        **base)))


def test_gradient_accumulation_disabled_differs_from_enabled():
    """Adagrad is not linear in the gradient: applying the devices' gradients one by one is not
    the update of their sum, so the two settings give different tables."""
    base = dict(optimizer=E.ADAGRAD, learning_rate=0.5)
    tables = []
    for accumulate in (True, False):
        o = tessel.OptimizationParameters(**base, gradient_accumulation=accumulate)
        emb, _ = train_and_compare(optimizer_config(P.ROW_WISE, S.DIV_DEFAULT, o, o), steps=5)
        tables.append(np.asarray(emb.get_table("small")))
    assert np.abs(tables[0] - tables[1]).max() > 1e-3


@pytest.mark.parametrize("placement,strategy", PLACEMENTS[1:])
def test_dynamic_learning_rates_are_fed_per_step_by_tag(placement, strategy):
    """TF's dynamic learning rate: each tag's value comes with the step's gradients (TF's
    SendTPUEmbeddingGradients learning_rates); here Adagrad on tag 1 and FTRL on tag 0 with
    schedules, and a table of each sharing tag 0."""
    ftrl = tessel.OptimizationParameters(**OPTIMIZERS["ftrl"], dynamic_learning_rate_tag=0)
    adagrad = tessel.OptimizationParameters(E.ADAGRAD, dynamic_learning_rate_tag=1)
    cfg = optimizer_config(placement, strategy, ftrl, adagrad)
    assert cfg.num_dynamic_learning_rates() == 2
    train_and_compare(cfg, learning_rates=lambda step: [0.3 / np.sqrt(1 + step),
                                                        0.05 + 0.002 * step])
    shared = tessel.OptimizationParameters(E.MOMENTUM, momentum=0.5, dynamic_learning_rate_tag=0)
    train_and_compare(optimizer_config(placement, strategy, shared, shared), steps=20,
                      learning_rates=lambda step: [0.1 * 0.95 ** step])


def test_non_lazy_adam_moves_rows_no_step_touched():
    """lazy_adam=False: every row's moments decay each step, so a row looked up once keeps
    moving afterwards (TF's use_non_lazy_adam); lazy Adam leaves it alone."""
    results = {}
    for lazy in (True, False):
        o = tessel.OptimizationParameters(E.ADAM, 0.1, beta1=0.5, beta2=0.9, epsilon=1e-3,
                                          lazy_adam=lazy)
        cfg = tessel.EmbeddingConfiguration(
            [tessel.TableDescriptor("t", 6, 2, o, P.ROW_WISE, C.SUM)],
            [tessel.FeatureDescriptor("f", 0)], tessel.EmbeddingMode.TRAINING, 1, S.MOD)
        emb = tessel.ShardedEmbedding(cfg, mesh_of(2))
        start = np.asarray(emb.get_table("t")).copy()
        for ids in ([3], []):  # row 3 once, then nothing
            rows = tessel.RaggedIds(np.array(ids, np.int64), np.array([0, len(ids)]))
            emb.lookup([[rows, rows]])
            emb.apply_gradients([[np.ones((1, 2), np.float32)] * 2])
        after_one = start[3] - 0.1 * 0.5 * 2 / (np.sqrt(0.1 * 4) + 1e-3)  # m = 1, v = 0.4
        results[lazy] = np.asarray(emb.get_table("t"))
        np.testing.assert_allclose(results[lazy][[0, 1, 2, 4, 5]], start[[0, 1, 2, 4, 5]],
                                   rtol=1e-6)  # untouched rows: zero moments, no move
        if lazy:
            np.testing.assert_allclose(results[lazy][3], after_one, rtol=1e-5)
        else:  # the second step: m = 0.5, v = 0.36 though the row was not looked up
            np.testing.assert_allclose(
                results[lazy][3], after_one - 0.1 * 0.5 / (np.sqrt(0.36) + 1e-3), rtol=1e-5)


def mini_config(optimizer_parameters):
    return tessel.EmbeddingConfiguration(
        [tessel.TableDescriptor("t", 8, 2, optimizer_parameters)],
        [tessel.FeatureDescriptor("f", 0)], tessel.EmbeddingMode.TRAINING, 2)


@pytest.mark.parametrize("params,message", [
    (dict(optimizer=E.MOMENTUM, momentum=-1), r"table 't' \(momentum\): momentum \(must be >= 0\)"),
    (dict(optimizer=E.RMS_PROP, rho=2), r"\(rms_prop\): rho \(must be in \[0, 1\]\) 2"),
    (dict(optimizer=E.CENTERED_RMS_PROP, epsilon=0), r"\(centered_rms_prop\): epsilon"),
    (dict(optimizer=E.FTRL, learning_rate_power=0.5), r"\(ftrl\): learning_rate_power"),
    (dict(optimizer=E.FTRL, learning_rate=0), r"\(ftrl\): learning_rate \(must be > 0\) 0"),
    (dict(optimizer=E.FTRL, l2_regularization_strength=-1), r"\(ftrl\): l2_regularization"),
    (dict(optimizer=E.PROXIMAL_ADAGRAD, l1_regularization_strength=-1),
     r"\(proximal_adagrad\): l1_regularization_strength \(must be >= 0\) -1"),
    (dict(optimizer=E.ADADELTA, epsilon=-1), r"\(adadelta\): epsilon \(must be > 0\) -1"),
    (dict(optimizer=E.ADAM, clip_weight_min=1, clip_weight_max=0),
     r"\(adam\): clip_weight_min \(above clip_weight_max 0\) 1"),
    (dict(optimizer=E.SGD, clip_gradient_min=float("nan")), r"\(sgd\): clip_gradient_min"),
    (dict(optimizer=E.SGD, weight_decay_factor=-1), r"\(sgd\): weight_decay_factor"),
    (dict(optimizer=E.SGD, dynamic_learning_rate_tag=2), r"tag 0 is used by no table"),
])
def test_bad_hyper_parameters_are_invalid_argument_naming_optimizer_and_value(params, message):
    with pytest.raises(tessel.InvalidArgumentError, match=message):
        tessel.ShardedEmbedding(mini_config(tessel.OptimizationParameters(**params)), mesh_of(2))


def test_dynamic_learning_rates_are_checked_per_step():
    cfg = mini_config(tessel.OptimizationParameters(E.FTRL, dynamic_learning_rate_tag=0))
    emb = tessel.ShardedEmbedding(cfg, mesh_of(2))
    ids = tessel.RaggedIds(np.array([1, 2]), np.array([0, 1, 2]))
    grads = [[np.ones((2, 2), np.float32)] * 2]
    emb.lookup([[ids, ids]])
    with pytest.raises(tessel.InvalidArgumentError, match="0 learning rates given, but the "
                       "tables' dynamic learning rate tags need 1"):
        emb.apply_gradients(grads)
    with pytest.raises(tessel.InvalidArgumentError,
                       match=r"learning rate 0 of tag 0 \(table 't', ftrl\) must be finite and > 0"):
        emb.apply_gradients(grads, [0.0])
    emb.apply_gradients(grads, [0.1])  # the lookup is still there to apply
    constant = tessel.ShardedEmbedding(mini_config(tessel.OptimizationParameters()), mesh_of(2))
    constant.lookup([[ids, ids]])
    with pytest.raises(tessel.InvalidArgumentError, match="1 learning rates given"):
        constant.apply_gradients(grads, [0.1])


def test_text_form_of_every_optimizer_round_trips():
    for name, params in OPTIMIZERS.items():
        cfg = mini_config(tessel.OptimizationParameters(**params, clip_weight_max=2.0,
                                                        weight_decay_factor=0.1))
        assert tessel.EmbeddingConfiguration.from_text(cfg.to_text()) == cfg, name
        assert tessel.EmbeddingConfiguration.from_serialized(cfg.serialized()) == cfg, name
    parsed = tessel.EmbeddingConfiguration.from_text("""
      table_descriptor { name: "t" vocabulary_size: 8 dimension: 2
        optimization_parameters { learning_rate { dynamic { tag: 0 } }
          gradient_clipping_limits { lower { value: -1 } upper { value: 1 } }
          ftrl { l1: 0.1 lr_power: -0.5 beta: 1 } } }
      feature_descriptor { name: "f" table_id: 0 }
      mode: TRAINING batch_size_per_tensor_core: 2""")
    o = parsed.tables[0].optimization_parameters
    assert o.optimizer == E.FTRL and o.dynamic_learning_rate_tag == 0
    assert (o.clip_gradient_min, o.clip_gradient_max) == (-1, 1)
    assert o.clip_weight_min == -np.inf and o.beta == 1
    assert tessel.optimizer_name(E.CENTERED_RMS_PROP) == "centered_rms_prop"
