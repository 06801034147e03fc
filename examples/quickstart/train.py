"""A small, real training loop: logistic regression on a synthetic two-moons-like set.

Plain NumPy, a few seconds on a laptop CPU. It uses the TauGrid workload SDK the way a
bigger job would:

- ``taugrid.log(step=..., ...)`` records metrics every epoch ($TAU_METRICS_FILE);
- every $CKPT_EVERY epochs (default 5) it saves the weights inside
  ``taugrid.checkpoint.saving(epoch)``, which appears in $TAU_CHECKPOINT_DIR only once
  complete;
- on start it resumes from ``taugrid.checkpoint.latest()`` when there is one;
- after SIGTERM (``taugrid.should_stop()``: a cancel or a preemption) it saves a
  checkpoint and stops; a restart carries on from there.

At the end it writes the trained weights and a metrics summary to $TAU_OUTPUT_DIR, which
`tau get` downloads.
"""

import json
import os
import sys
import time

import numpy as np

import taugrid

STOPPED_EXIT_CODE = 143  # 128 + SIGTERM: stopped early, not finished


def make_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    t = rng.uniform(0, np.pi, n)
    labels = rng.integers(0, 2, n)
    x = np.where(labels == 0, np.cos(t), 1 - np.cos(t))
    y = np.where(labels == 0, np.sin(t), 0.5 - np.sin(t))
    pts = np.stack([x, y], axis=1) + rng.normal(0, 0.1, (n, 2))
    # Random Fourier features make the problem linearly separable enough to learn.
    proj = rng.normal(0, 2.0, (2, 64))
    feats = np.concatenate([np.sin(pts @ proj), np.cos(pts @ proj)], axis=1)
    return feats, labels.astype(np.float64)


def evaluate(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: float) -> tuple[float, float]:
    """Log loss and accuracy on (x, y)."""
    p = 1 / (1 + np.exp(-(x @ w + b)))
    loss = -np.mean(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9))
    return float(loss), float(np.mean((p > 0.5) == y))


def save_checkpoint(epoch: int, w: np.ndarray, b: float) -> None:
    with taugrid.checkpoint.saving(epoch) as d:
        np.savez(d / "weights.npz", w=w, b=b)


def main() -> int:
    epochs = int(os.environ.get("EPOCHS", "20"))
    lr = float(os.environ.get("LR", "0.5"))
    ckpt_every = int(os.environ.get("CKPT_EVERY", "5"))
    taugrid.should_stop()  # make sure SIGTERM is caught from here on
    rng = np.random.default_rng(0)
    x, y = make_data(4000, rng)
    split = 3200
    w = np.zeros(x.shape[1])
    b = 0.0
    done = 0
    print(f"run {os.environ.get('TAU_RUN_ID', '-')}: {epochs} epochs, lr={lr}", flush=True)
    ckpt = taugrid.checkpoint.latest()
    if ckpt is not None:
        with np.load(ckpt.path / "weights.npz") as state:
            w, b = state["w"], float(state["b"])
        done = ckpt.step
        print(f"resumed from step {done}", flush=True)
    for epoch in range(done + 1, epochs + 1):
        for i in range(0, split, 128):
            xb, yb = x[i : i + 128], y[i : i + 128]
            p = 1 / (1 + np.exp(-(xb @ w + b)))
            w -= lr * xb.T @ (p - yb) / len(yb)
            b -= lr * float(np.mean(p - yb))
        loss, acc = evaluate(x[split:], y[split:], w, b)
        print(f"epoch {epoch:3d}  val_loss {loss:.4f}  val_acc {acc:.3f}", flush=True)
        taugrid.log(step=epoch, val_loss=round(loss, 6), val_acc=acc)
        stop = taugrid.should_stop() and epoch < epochs  # after the last one: done anyway
        if epoch % ckpt_every == 0 or epoch == epochs or stop:
            save_checkpoint(epoch, w, b)
            print(f"checkpoint at step {epoch}", flush=True)
        if stop:
            print(f"stopped at step {epoch}; a restart resumes from here", flush=True)
            return STOPPED_EXIT_CODE
        time.sleep(0.05)
    loss, acc = evaluate(x[split:], y[split:], w, b)
    out = os.environ.get("TAU_OUTPUT_DIR", "outputs")
    os.makedirs(out, exist_ok=True)
    np.savez(os.path.join(out, "model.npz"), w=w, b=b)
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump({"val_loss": loss, "val_acc": acc, "epochs": epochs}, f)
    print(f"saved model to {out}/model.npz (val_acc {acc:.3f})", flush=True)
    return 0 if acc > 0.8 else 1


if __name__ == "__main__":
    sys.exit(main())
