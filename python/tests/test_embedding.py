"""Sharded embedding tables against a dense NumPy reference.

The reference here shares no code with tessel: it holds each whole table as a NumPy array, looks
bags up with fancy indexing, and applies SGD / Adagrad / lazy Adam (TF's TPU embedding formulas)
to the rows the step touched. Every placement and strategy, uneven tables, empty bags, repeated
ids, weights, 1 / 2 / 4 devices; a 100-step two-tower training on synthetic clicks; the
configuration's text form and the lifecycle step. Every collective is bounded by the
ShardedEmbedding's timeout (30 s here), so no test can hang.
"""

import numpy as np
import pytest

import tessel
from conftest import devices

E = tessel.EmbeddingOptimizer
P = tessel.TablePlacement
S = tessel.ShardingStrategy
C = tessel.EmbeddingCombiner


def mesh_of(n):
    return tessel.Mesh(["x"], np.arange(n), list(range(n)), devices(n))


def config(placement, strategy, optimizer, batch=4, combiners=(C.MEAN, C.SQRTN)):
    opt = tessel.OptimizationParameters(optimizer=optimizer, learning_rate=0.3, beta1=0.8,
                                        beta2=0.9, epsilon=1e-3)
    tables = [
        tessel.TableDescriptor("big", 13, 5, opt, placement, combiners[0]),
        tessel.TableDescriptor("small", 5, 3, opt, placement, combiners[1]),
    ]
    features = [tessel.FeatureDescriptor("a", 0), tessel.FeatureDescriptor("b", 1),
                tessel.FeatureDescriptor("c", 0, [batch])]
    return tessel.EmbeddingConfiguration(tables, features, tessel.EmbeddingMode.TRAINING, batch,
                                         strategy)


def random_bags(rng, vocab, bags, weighted):
    """CSR ids: bag 0 empty, others 0..4 ids drawn from a few rows (repeats likely)."""
    counts = np.concatenate([[0], rng.integers(0, 5, bags - 1)])
    splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    ids = rng.integers(0, vocab, int(splits[-1])).astype(np.int64)
    weights = rng.uniform(0.25, 2.0, ids.size).astype(np.float32) if weighted else None
    return ids, splits, weights


class DenseReference:
    """Whole tables in NumPy, looked up and updated the way TF's TPU embedding defines."""

    def __init__(self, cfg, tables):
        self.cfg = cfg
        self.tables = [np.array(t, dtype=np.float64) for t in tables]
        init = [t.optimization_parameters.initial_accumulator for t in cfg.tables]
        self.slot0 = [np.full_like(t, a if d.optimization_parameters.optimizer == E.ADAGRAD else 0)
                      for t, a, d in zip(self.tables, init, cfg.tables)]
        self.slot1 = [np.zeros_like(t) for t in self.tables]

    @staticmethod
    def factors(splits, weights, combiner, nnz):
        w = np.ones(nnz) if weights is None else weights.astype(np.float64)
        bag = np.repeat(np.arange(len(splits) - 1), np.diff(splits))
        if combiner == C.SUM:
            denom = np.ones(len(splits) - 1)
        elif combiner == C.MEAN:
            denom = np.bincount(bag, weights=w, minlength=len(splits) - 1)
        else:
            denom = np.sqrt(np.bincount(bag, weights=w * w, minlength=len(splits) - 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            f = np.where(denom[bag] == 0, 0.0, w / denom[bag])
        return bag, f

    def lookup(self, feature, ids, splits, weights):
        t = self.cfg.features[feature].table_id
        bag, f = self.factors(splits, weights, self.cfg.tables[t].combiner, ids.size)
        out = np.zeros((len(splits) - 1, self.tables[t].shape[1]))
        np.add.at(out, bag, f[:, None] * self.tables[t][ids])
        return out

    def row_gradients(self, feature, ids, splits, weights, grad, sums):
        t = self.cfg.features[feature].table_id
        bag, f = self.factors(splits, weights, self.cfg.tables[t].combiner, ids.size)
        np.add.at(sums[t], ids, f[:, None] * grad[bag])
        sums[t + len(self.tables)] |= np.isin(np.arange(sums[t].shape[0]), ids)

    def apply(self, sums):
        n = len(self.tables)
        for t, desc in enumerate(self.cfg.tables):
            o = desc.optimization_parameters
            rows = np.nonzero(sums[t + n])[0]
            if desc.placement == P.DATA_PARALLEL:  # touched = nonzero dense gradient
                rows = rows[np.any(sums[t][rows] != 0, axis=1)]
            g = sums[t][rows]
            w, m, v = self.tables[t], self.slot0[t], self.slot1[t]
            if o.optimizer == E.SGD:
                w[rows] -= o.learning_rate * g
            elif o.optimizer == E.ADAGRAD:
                m[rows] += g * g
                w[rows] -= o.learning_rate * g / np.sqrt(m[rows])
            else:
                m[rows] = o.beta1 * m[rows] + (1 - o.beta1) * g
                v[rows] = o.beta2 * v[rows] + (1 - o.beta2) * g * g
                w[rows] -= o.learning_rate * m[rows] / (np.sqrt(v[rows]) + o.epsilon)

    def new_sums(self):
        return ([np.zeros_like(t) for t in self.tables] +
                [np.zeros(t.shape[0], dtype=bool) for t in self.tables])


def check_steps(n, placement, strategy, optimizer, weighted, steps=2, seed=0):
    cfg = config(placement, strategy, optimizer)
    emb = tessel.ShardedEmbedding(cfg, mesh_of(n), seed=seed + 3, timeout=30)
    ref = DenseReference(cfg, [np.asarray(emb.get_table(t.name)) for t in cfg.tables])
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        inputs, raw = [], []
        for f in cfg.features:
            vocab = cfg.tables[f.table_id].vocabulary_size
            per_device = [random_bags(rng, vocab, 4, weighted) for _ in range(n)]
            raw.append(per_device)
            inputs.append([tessel.RaggedIds(*b) for b in per_device])
        act = emb.lookup(inputs)
        sums, grads = ref.new_sums(), []
        for fi, per_device in enumerate(raw):
            grads.append([])
            for d, (ids, splits, weights) in enumerate(per_device):
                np.testing.assert_allclose(np.asarray(act[fi][d]),
                                           ref.lookup(fi, ids, splits, weights),
                                           rtol=1e-5, atol=1e-6)
                g = rng.standard_normal(np.asarray(act[fi][d]).shape).astype(np.float32)
                grads[-1].append(g)
                ref.row_gradients(fi, ids, splits, weights, g.astype(np.float64), sums)
        emb.apply_gradients(grads)
        ref.apply(sums)
        for t, desc in enumerate(cfg.tables):
            np.testing.assert_allclose(np.asarray(emb.get_table(desc.name)), ref.tables[t],
                                       rtol=1e-5, atol=1e-5)
    return emb, ref


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("strategy", [S.DIV_DEFAULT, S.MOD])
def test_row_wise_equals_dense_reference(n, strategy):
    check_steps(n, P.ROW_WISE, strategy, E.SGD, weighted=(n != 2))


@pytest.mark.parametrize("placement", [P.ROW_WISE, P.TABLE_WISE, P.COLUMN_WISE, P.DATA_PARALLEL])
@pytest.mark.parametrize("optimizer", [E.SGD, E.ADAGRAD, E.ADAM])
def test_every_placement_and_optimizer_equals_dense_reference(placement, optimizer):
    emb, ref = check_steps(4, placement, S.MOD, optimizer, weighted=True, seed=1)
    if optimizer == E.ADAGRAD:
        np.testing.assert_allclose(np.asarray(emb.get_slot("big", "accumulators")), ref.slot0[0],
                                   rtol=1e-5)
    if optimizer == E.ADAM:
        assert emb.slot_names("small") == ["momenta", "velocities"]
        np.testing.assert_allclose(np.asarray(emb.get_slot("small", "momenta")), ref.slot0[1],
                                   rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("placement", [P.ROW_WISE, P.COLUMN_WISE, P.DATA_PARALLEL])
def test_backward_pass_only_updates_as_the_reference_without_activations(placement):
    """TF's BACKWARD_PASS_ONLY mode runs "just the backward_pass": lookup routes the ids to the
    owners but gathers no rows and returns no activations; apply_gradients updates the rows."""
    cfg = config(placement, S.MOD, E.ADAGRAD)
    cfg.mode = tessel.EmbeddingMode.BACKWARD_PASS_ONLY
    emb = tessel.ShardedEmbedding(cfg, mesh_of(4), seed=5, timeout=30)
    ref = DenseReference(cfg, [np.asarray(emb.get_table(t.name)) for t in cfg.tables])
    rng = np.random.default_rng(2)
    for _ in range(2):
        sums, inputs, grads = ref.new_sums(), [], []
        for fi, f in enumerate(cfg.features):
            table = cfg.tables[f.table_id]
            bags = [random_bags(rng, table.vocabulary_size, 4, True) for _ in range(4)]
            inputs.append([tessel.RaggedIds(*b) for b in bags])
            grads.append([rng.standard_normal((4, table.dimension)).astype(np.float32)
                          for _ in bags])
            for (ids, splits, weights), g in zip(bags, grads[-1]):
                ref.row_gradients(fi, ids, splits, weights, g.astype(np.float64), sums)
        assert emb.lookup(inputs) == []
        assert emb.last_step_stats().collectives == 1  # the requests' all-to-all-v only
        emb.apply_gradients(grads)
        ref.apply(sums)
        for t, desc in enumerate(cfg.tables):
            np.testing.assert_allclose(np.asarray(emb.get_table(desc.name)), ref.tables[t],
                                       rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(np.asarray(emb.get_slot(desc.name, "accumulators")),
                                       ref.slot0[t], rtol=1e-5)


def test_sum_combiner_and_uneven_memory_per_device():
    cfg = config(P.ROW_WISE, S.DIV_DEFAULT, E.ADAGRAD, combiners=(C.SUM, C.SUM))
    emb = tessel.ShardedEmbedding(cfg, mesh_of(4))
    # 13 rows over 4: 4, 3, 3, 3 rows of 5 floats (+ accumulators); 5 rows: 2, 1, 1, 1 of 3.
    assert [emb.memory_bytes(i) for i in range(4)] == [
        2 * 4 * (r1 * 5 + r2 * 3) for r1, r2 in [(4, 2), (3, 1), (3, 1), (3, 1)]]
    ids = np.array([3, 3, 12], dtype=np.int64)
    bags = [tessel.RaggedIds(ids, np.array([0, 0, 2, 3, 3]))] * 4
    act = emb.lookup([bags, [tessel.RaggedIds(np.array([], np.int64), np.zeros(5, np.int64))] * 4,
                      bags])
    table = np.asarray(emb.get_table("big"))
    np.testing.assert_allclose(np.asarray(act[0][1]),
                               [np.zeros(5), 2 * table[3], table[12], np.zeros(5)], rtol=1e-6)
    assert not np.asarray(act[1][0]).any()  # every bag empty
    stats = emb.last_step_stats()
    assert stats.ids == 4 * 6 and stats.unique_ids == 4 * 2


def test_errors_name_feature_and_id():
    cfg = config(P.ROW_WISE, S.MOD, E.SGD)
    emb = tessel.ShardedEmbedding(cfg, mesh_of(2))
    ok = tessel.RaggedIds(np.array([1, 2]), np.array([0, 1, 1, 2, 2]))
    bad = tessel.RaggedIds(np.array([1, 13]), np.array([0, 1, 1, 2, 2]))
    with pytest.raises(tessel.InvalidArgumentError,
                       match=r"feature 'c' on .*CPU:1: id 13 \(position 1\) is outside table 'big'"):
        emb.lookup([[ok, ok], [ok, ok], [ok, bad]])
    with pytest.raises(ValueError, match="row_splits has 3 entries, not bags \\+ 1 = 5"):
        emb.lookup([[ok, ok], [ok, tessel.RaggedIds(np.array([1]), np.array([0, 1, 1]))],
                    [ok, ok]])
    with pytest.raises(tessel.FailedPreconditionError, match="needs a lookup first"):
        emb.apply_gradients([[np.zeros((4, 5), np.float32)] * 2, [np.zeros((4, 3), np.float32)] * 2,
                             [np.zeros((4, 5), np.float32)] * 2])
    with pytest.raises(ValueError, match="no table named 'nope'"):
        emb.get_table("nope")
    bad_cfg = config(P.ROW_WISE, S.MOD, E.SGD)
    bad_cfg.tables[1].dimension = 0
    with pytest.raises(ValueError, match="table 'small': dimension 0 must be > 0"):
        tessel.ShardedEmbedding(bad_cfg, mesh_of(2))


def test_text_form_round_trips_and_reads_tf_text():
    cfg = config(P.COLUMN_WISE, S.MOD, E.ADAM)
    assert tessel.EmbeddingConfiguration.from_text(cfg.to_text()) == cfg
    assert tessel.EmbeddingConfiguration.from_serialized(cfg.serialized()) == cfg
    tf_text = """
      table_descriptor { name: "t" vocabulary_size: 8 dimension: 2
        optimization_parameters { learning_rate { constant: 0.5 } adagrad {} } }
      feature_descriptor { name: "f" table_id: 0 input_shape: 4 }
      mode: INFERENCE batch_size_per_tensor_core: 4 sharding_strategy: DIV_DEFAULT"""
    parsed = tessel.EmbeddingConfiguration.from_text(tf_text)
    assert parsed.mode == tessel.EmbeddingMode.INFERENCE
    assert parsed.tables[0].optimization_parameters.optimizer == E.ADAGRAD
    with pytest.raises(ValueError, match="lion"):
        tessel.EmbeddingConfiguration.from_text(
            "table_descriptor { optimization_parameters { lion {} } }")
    yogi = tessel.EmbeddingConfiguration.from_text(
        "table_descriptor { optimization_parameters { proximal_yogi { beta1: 0.5 } } }")
    assert yogi.tables[0].optimization_parameters.optimizer == E.PROXIMAL_YOGI


def test_table_sharding_is_tfs_div_and_mod():
    t = tessel.TableDescriptor("t", 13, 2)
    div = tessel.TableSharding(t, S.DIV_DEFAULT, 5)
    mod = tessel.TableSharding(t, S.MOD, 5)
    assert [div.owners(r)[0].device for r in range(13)] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4]
    assert [mod.owners(r)[0].device for r in range(13)] == [r % 5 for r in range(13)]


def test_lifecycle_configure_after_the_system_and_shutdown_releases():
    assert not tessel.is_embedding_initialized()
    with pytest.raises(tessel.FailedPreconditionError):
        tessel.configure_embedding(config(P.ROW_WISE, S.MOD, E.SGD))
    tessel.initialize_accelerator_system(num_logical_cpu_devices=3)
    try:
        emb = tessel.configure_embedding(config(P.ROW_WISE, S.MOD, E.SGD))
        assert tessel.is_embedding_initialized()
        assert emb.num_devices == 3
        assert tessel.embedding() is not None
    finally:
        tessel.shutdown_accelerator_system()
    assert not tessel.is_embedding_initialized()
    assert emb.is_released
    with pytest.raises(tessel.FailedPreconditionError, match="disconnect_host"):
        emb.get_table("big")


# ---- a two-tower click model: 100 steps equal to the dense reference ----------------------------

def two_tower_config(batch):
    adagrad = tessel.OptimizationParameters(E.ADAGRAD, learning_rate=0.2)
    sgd = tessel.OptimizationParameters(E.SGD, learning_rate=0.5)
    return tessel.EmbeddingConfiguration(
        [tessel.TableDescriptor("users", 37, 8, adagrad, P.ROW_WISE, C.SUM),
         tessel.TableDescriptor("items", 23, 8, sgd, P.COLUMN_WISE, C.MEAN)],
        [tessel.FeatureDescriptor("user", 0), tessel.FeatureDescriptor("history", 1),
         tessel.FeatureDescriptor("item", 1)],
        tessel.EmbeddingMode.TRAINING, batch, S.MOD)


def click_batch(rng, n, batch):
    """Per device: one user, a history of 0..3 items, one candidate item, a click label."""
    out = []
    for _ in range(n):
        users = rng.zipf(1.5, batch) % 37
        hist_len = rng.integers(0, 4, batch)
        hist = rng.zipf(1.3, int(hist_len.sum())) % 23
        items = rng.zipf(1.3, batch) % 23
        label = ((users + items) % 3 == 0).astype(np.float64)
        out.append((users.astype(np.int64), hist.astype(np.int64),
                    np.concatenate([[0], np.cumsum(hist_len)]).astype(np.int64),
                    items.astype(np.int64), label))
    return out


def tower_loss(u, h, i, label):
    """Logistic loss of sigmoid(<u + h, i>), and its gradients for u, h and i."""
    q = u + h
    z = np.sum(q * i, axis=1)
    p = 1 / (1 + np.exp(-z))
    loss = np.mean(-label * np.log(p + 1e-12) - (1 - label) * np.log(1 - p + 1e-12))
    dz = (p - label) / len(label)
    return loss, dz[:, None] * i, dz[:, None] * q


def test_two_tower_training_matches_dense_reference_for_100_steps():
    n, batch = 4, 8
    cfg = two_tower_config(batch)
    emb = tessel.ShardedEmbedding(cfg, mesh_of(n), seed=11, timeout=30)
    ref = DenseReference(cfg, [np.asarray(emb.get_table(t.name)) for t in cfg.tables])
    rng = np.random.default_rng(5)
    ones = np.arange(batch + 1, dtype=np.int64)
    losses, ref_losses = [], []
    for _ in range(100):
        data = click_batch(rng, n, batch)
        inputs = [[tessel.RaggedIds(u, ones) for u, *_ in data],
                  [tessel.RaggedIds(h, s) for _, h, s, _, _ in data],
                  [tessel.RaggedIds(i, ones) for *_, i, _ in data]]
        act = emb.lookup(inputs)
        sums, grads, step, ref_step = ref.new_sums(), [[], [], []], 0.0, 0.0
        for d, (u, h, s, i, label) in enumerate(data):
            loss, gq, gi = tower_loss(*(np.asarray(act[f][d], np.float64) for f in range(3)), label)
            grads[0].append(gq.astype(np.float32))
            grads[1].append(gq.astype(np.float32))
            grads[2].append(gi.astype(np.float32))
            step += loss / n
            ru, rh, ri = (ref.lookup(0, u, ones, None), ref.lookup(1, h, s, None),
                          ref.lookup(2, i, ones, None))
            rloss, rq, rgi = tower_loss(ru, rh, ri, label)
            ref_step += rloss / n
            for f, (ids, splits, g) in enumerate([(u, ones, rq), (h, s, rq), (i, ones, rgi)]):
                # The reference takes its own gradients (float32 like tessel's inputs).
                ref.row_gradients(f, ids, splits, None, g.astype(np.float32).astype(np.float64),
                                  sums)
        emb.apply_gradients(grads)
        ref.apply(sums)
        losses.append(step)
        ref_losses.append(ref_step)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-5)
    assert losses[-1] < losses[0]  # it learns


def test_configure_embedding_on_a_host_follows_the_steps():
    channel = tessel.make_in_process_system_channel(1)
    runtime = tessel.Runtime(num_cpu_devices=2)
    host = tessel.Host(runtime, channel)
    coordinator = tessel.SystemCoordinator(host)
    cfg = config(P.ROW_WISE, S.DIV_DEFAULT, E.SGD)
    with pytest.raises(tessel.FailedPreconditionError, match=r"initialize_host \(step 3\)"):
        tessel.configure_embedding(cfg, host=host)
    configuration = coordinator.configure_distributed_system([host.disconnect_host()])
    ids = host.initialize_host(configuration)
    with pytest.raises(tessel.FailedPreconditionError, match=r"set_global_topology \(step 5\)"):
        tessel.configure_embedding(cfg, host=host)
    host.set_global_topology(coordinator.wait_for_distributed_system([ids],
                                                                     startup_timeout_sec=10))
    emb = tessel.configure_embedding(cfg, host=host)
    assert tessel.is_embedding_initialized(host) and emb.num_devices == 2
    assert tessel.host_embedding(host).num_devices == 2
    again = tessel.configure_embedding(cfg, host=host)  # replaces the tables
    assert emb.is_released and not again.is_released
    host.disconnect_host()
    assert again.is_released and not tessel.is_embedding_initialized(host)
    assert again.memory_bytes(0) == 0
    assert tessel.combiner_from_name("sqrtn") == C.SQRTN
    assert tessel.sharding_strategy_name(S.MOD) == "MOD"


def test_host_on_disconnect_runs_each_listener_once_per_disconnect():
    host = tessel.Host(tessel.Runtime(num_cpu_devices=1), tessel.make_in_process_system_channel(1))
    seen = []
    host.on_disconnect("a", lambda: seen.append("a"))
    host.on_disconnect("a", lambda: seen.append("a2"))  # replaces "a"
    host.on_disconnect("b", lambda: seen.append("b"))
    host.disconnect_host()
    assert seen == ["a2", "b"]


@pytest.mark.parametrize("placement", [P.ROW_WISE, P.TABLE_WISE, P.COLUMN_WISE, P.DATA_PARALLEL])
def test_fewer_rows_and_columns_than_devices_and_all_bags_empty(placement):
    cfg = tessel.EmbeddingConfiguration(
        [tessel.TableDescriptor("t", 2, 1, tessel.OptimizationParameters(E.ADAGRAD, 0.1),
                                placement, C.SUM)],
        [tessel.FeatureDescriptor("f", 0)], tessel.EmbeddingMode.TRAINING, 2, S.DIV_DEFAULT)
    emb = tessel.ShardedEmbedding(cfg, mesh_of(4))
    table = np.asarray(emb.get_table("t"))
    act = emb.lookup([[tessel.RaggedIds(np.array([1, 1, 0]), np.array([0, 2, 3]))] * 4])
    np.testing.assert_allclose(np.asarray(act[0][2]), [2 * table[1], table[0]], rtol=1e-6)
    emb.apply_gradients([[np.ones((2, 1), np.float32)] * 4])
    # Row 0: 4 devices x 1 id; row 1: 4 x 2 ids (gradient 1 each), summed before Adagrad.
    np.testing.assert_allclose(np.asarray(emb.get_slot("t", "accumulators")).ravel(),
                               [0.1 + 4 ** 2, 0.1 + 8 ** 2], rtol=1e-6)
    empty = tessel.RaggedIds(np.array([], np.int64), np.zeros(3, np.int64))
    assert not np.asarray(emb.lookup([[empty] * 4])[0][1]).any()
    emb.apply_gradients([[np.ones((2, 1), np.float32)] * 4])  # touches nothing
    np.testing.assert_allclose(np.asarray(emb.get_slot("t", "accumulators")).ravel(),
                               [0.1 + 4 ** 2, 0.1 + 8 ** 2], rtol=1e-6)


def test_a_table_too_large_for_its_device_is_a_memory_error_naming_it():
    cfg = tessel.EmbeddingConfiguration([tessel.TableDescriptor("huge", 10 ** 12, 64)],
                                        [tessel.FeatureDescriptor("f", 0)],
                                        tessel.EmbeddingMode.TRAINING, 2)
    with pytest.raises(MemoryError, match="table 'huge': the shard of 500000000000 x 64"):
        tessel.ShardedEmbedding(cfg, mesh_of(2))
