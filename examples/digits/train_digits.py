"""A small convolutional network on scikit-learn's digits (8x8 images, 10 classes), trained data
parallel over a 4-device mesh with tessel's Python API.

    PYTHONPATH=build/python /usr/bin/python3 examples/digits/train_digits.py [--epochs N]

The model: conv 3x3 (1 -> 16 channels, "SAME") + ReLU, 2x2 max pool, conv 3x3 (16 -> 32) + ReLU,
2x2 max pool, a dense layer (2 * 2 * 32 -> 10). Images and labels are sharded over the mesh's
`batch` dim, the parameters replicated: every op runs on each device's share of the batch with
no communication, and each parameter's gradient comes back Partial(sum) over `batch` from its
op's VJP and is all-reduced once per step by the gradient tape (one fused bucket). AdamW updates
the replicated parameters on every device alike. The data is sklearn.datasets.load_digits (it
ships inside scikit-learn: Debian's python3-sklearn), split 80/20 stratified, the test split
held out from training.
"""
import argparse
import sys
import time

import numpy as np

import tessel

U = tessel.UNSHARDED
CLASSES = 10
DEFAULT_EPOCHS = 20


def load_split(seed):
    """(train images, train labels, test images, test labels): NHWC float32 in [0, 1], int32."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]  # [1797, 8, 8, 1]
    labels = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=0.2, random_state=seed, stratify=labels)
    return x_train, y_train, x_test, y_test


def parameter_shapes():
    """[(name, shape)]: HWIO filters and their biases, then the dense head."""
    return [("conv1.w", (3, 3, 1, 16)), ("conv1.b", (16,)),
            ("conv2.w", (3, 3, 16, 32)), ("conv2.b", (32,)),
            ("dense.w", (2 * 2 * 32, CLASSES)), ("dense.b", (CLASSES,))]


def init(mesh, seed):
    """He-normal weights, zero biases, replicated over the mesh."""
    rng = np.random.default_rng(seed)
    params = []
    for _, shape in parameter_shapes():
        if len(shape) == 1:
            value = np.zeros(shape, np.float32)
        else:
            fan_in = int(np.prod(shape[:-1]))
            value = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape).astype(np.float32)
        params.append(tessel.copy_to_mesh(value, tessel.Layout.replicated(mesh, len(shape))))
    return params


def forward(params, images):
    """Logits [batch, 10] of NHWC images [batch, 8, 8, 1]."""
    w1, b1, w2, b2, wd, bd = params
    h = tessel.relu(tessel.conv2d(images, w1, 1, "SAME") + b1)   # [n, 8, 8, 16]
    h = tessel.max_pool2d(h, 2, 2, "VALID")                      # [n, 4, 4, 16]
    h = tessel.relu(tessel.conv2d(h, w2, 1, "SAME") + b2)        # [n, 4, 4, 32]
    h = tessel.max_pool2d(h, 2, 2, "VALID")                      # [n, 2, 2, 32]
    h = tessel.reshape(h, [h.shape[0], 2 * 2 * 32])
    return tessel.matmul(h, wd) + bd


def loss(params, images, labels):
    return tessel.reduce_mean(
        tessel.sparse_softmax_cross_entropy_with_logits(labels, forward(params, images)))


def accuracy(params, images, labels, mesh):
    """The fraction of images whose largest logit is their label."""
    x = tessel.copy_to_mesh(images, tessel.Layout(["batch", U, U, U], mesh))
    guess = np.asarray(tessel.to_host(tessel.argmax(forward(params, x), -1)))
    return float(np.mean(guess == labels))


def train(epochs=DEFAULT_EPOCHS, batch_size=64, learning_rate=3e-3, seed=0, devices=4, log=print):
    """Trains on the training split, data parallel over `devices`; returns a dict with the test
    accuracy, the last epoch's mean loss, the training seconds and the steps taken."""
    x_train, y_train, x_test, y_test = load_split(seed)
    mesh = tessel.create_mesh([("batch", devices)])
    images_layout = tessel.Layout(["batch", U, U, U], mesh)
    labels_layout = tessel.Layout(["batch"], mesh)
    params = init(mesh, seed)
    optimizer = tessel.AdamW(learning_rate, weight_decay=1e-4)
    rng = np.random.default_rng(seed)
    steps_per_epoch = len(x_train) // batch_size  # the remainder is left out: one batch shape
    start = time.time()
    steps, epoch_loss = 0, float("nan")
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        total = 0.0
        for s in range(steps_per_epoch):
            batch = order[s * batch_size:(s + 1) * batch_size]
            x = tessel.copy_to_mesh(x_train[batch], images_layout)
            y = tessel.copy_to_mesh(y_train[batch], labels_layout)
            value, grads = tessel.value_and_grad(lambda p: loss(p, x, y), params)
            params = optimizer.apply(params, grads)
            total += float(np.asarray(tessel.to_host(value)))
            steps += 1
        epoch_loss = total / steps_per_epoch
        if log is not None:
            log(f"epoch {epoch + 1:3d} loss {epoch_loss:.4f} ({time.time() - start:.1f} s)")
    seconds = time.time() - start
    test = accuracy(params, x_test, y_test, mesh)
    if log is not None:
        log(f"test accuracy {test:.4f} on {len(y_test)} held-out images "
            f"({steps} steps, {seconds:.1f} s of training on {devices} devices)")
    return {"test_accuracy": test, "train_loss": epoch_loss, "seconds": seconds, "steps": steps,
            "train_accuracy": accuracy(params, x_train, y_train, mesh)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", type=int, default=4, help="the batch mesh dim's size")
    args = parser.parse_args()
    result = train(args.epochs, args.batch_size, args.learning_rate, args.seed, args.devices)
    return 0 if result["test_accuracy"] >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
