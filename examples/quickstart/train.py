"""A small, real training loop: logistic regression on a synthetic two-moons-like set.

Plain NumPy, a few seconds on a laptop CPU. It logs progress every epoch and writes the
trained weights and a metrics summary to $TAU_OUTPUT_DIR, which `tau get` downloads.
"""

import json
import os
import sys
import time

import numpy as np


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


def main() -> int:
    epochs = int(os.environ.get("EPOCHS", "20"))
    lr = float(os.environ.get("LR", "0.5"))
    rng = np.random.default_rng(0)
    x, y = make_data(4000, rng)
    split = 3200
    w = np.zeros(x.shape[1])
    b = 0.0
    print(f"run {os.environ.get('TAU_RUN_ID', '-')}: {epochs} epochs, lr={lr}", flush=True)
    for epoch in range(1, epochs + 1):
        for i in range(0, split, 128):
            xb, yb = x[i : i + 128], y[i : i + 128]
            p = 1 / (1 + np.exp(-(xb @ w + b)))
            w -= lr * xb.T @ (p - yb) / len(yb)
            b -= lr * float(np.mean(p - yb))
        p_val = 1 / (1 + np.exp(-(x[split:] @ w + b)))
        loss = -np.mean(
            y[split:] * np.log(p_val + 1e-9) + (1 - y[split:]) * np.log(1 - p_val + 1e-9)
        )
        acc = float(np.mean((p_val > 0.5) == y[split:]))
        print(f"epoch {epoch:3d}  val_loss {loss:.4f}  val_acc {acc:.3f}", flush=True)
        time.sleep(0.05)
    out = os.environ.get("TAU_OUTPUT_DIR", "outputs")
    os.makedirs(out, exist_ok=True)
    np.savez(os.path.join(out, "model.npz"), w=w, b=b)
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump({"val_loss": float(loss), "val_acc": acc, "epochs": epochs}, f)
    print(f"saved model to {out}/model.npz (val_acc {acc:.3f})", flush=True)
    return 0 if acc > 0.8 else 1


if __name__ == "__main__":
    sys.exit(main())
