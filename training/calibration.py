"""Confidence calibration: temperature scaling (Guo et al., 2017) fitted on dev, expected
calibration error, and the hand-off threshold the dialog uses."""
import numpy as np


def softmax(x, t=1.0):
    z = np.asarray(x, np.float64) / t
    z = z - z.max(1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(1, keepdims=True)


def ece(probs, gold, bins=15):
    """Expected calibration error: the mean |accuracy - confidence| over equal-width confidence
    bins, weighted by the bins' shares."""
    probs, gold = np.asarray(probs), np.asarray(gold)
    conf = probs.max(1)
    right = probs.argmax(1) == gold
    edges = np.linspace(0, 1, bins + 1)
    e = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (conf > lo) & (conf <= hi)
        if sel.any():
            e += sel.mean() * abs(right[sel].mean() - conf[sel].mean())
    return float(e)


def fit_temperature(logits, gold):
    """The temperature minimising the negative log-likelihood of `gold` (rows with gold < 0 are
    left out): golden-section search on log T in [-3, 3]."""
    logits, gold = np.asarray(logits, np.float64), np.asarray(gold)
    ok = gold >= 0
    logits, gold = logits[ok], gold[ok]

    def nll(log_t):
        p = softmax(logits, np.exp(log_t))
        return -np.mean(np.log(p[np.arange(len(gold)), gold] + 1e-12))
    lo, hi = -3.0, 3.0
    g = (5 ** 0.5 - 1) / 2
    for _ in range(60):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if nll(a) < nll(b):
            hi = b
        else:
            lo = a
    return float(np.exp((lo + hi) / 2))


def handoff_threshold(probs, gold, max_rate=0.03, grid=np.arange(0.20, 0.81, 0.05)):
    """The highest calibrated confidence threshold that hands off at most `max_rate` of dev, with
    the accuracy of what falls below and above it."""
    probs, gold = np.asarray(probs), np.asarray(gold)
    conf = probs.max(1)
    right = probs.argmax(1) == gold
    best = {"threshold": float(grid[0]), "rate": float((conf < grid[0]).mean())}
    for t in grid:
        rate = float((conf < t).mean())
        if rate <= max_rate:
            best = {"threshold": round(float(t), 2), "rate": rate}
    t = best["threshold"]
    below, above = conf < t, conf >= t
    best["accuracy_below"] = float(right[below].mean()) if below.any() else None
    best["accuracy_above"] = float(right[above].mean()) if above.any() else None
    return best
