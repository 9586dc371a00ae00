"""Calibration figures from histograms: reliability diagram (guide §12.1) and PR curves with operating points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit

from rtscore.metrics import LogitBins, precision_recall_curve_from_hist


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def reliability_curve(
    pos: np.ndarray, neg: np.ndarray, bins: LogitBins, temperature: float, n_conf_bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per probability bin: mean predicted probability, observed positive frequency, pixel weight."""
    p = expit(bins.centres / temperature)
    which = np.minimum((p * n_conf_bins).astype(np.int64), n_conf_bins - 1)
    count = np.bincount(which, weights=pos + neg, minlength=n_conf_bins)
    conf = np.bincount(which, weights=(pos + neg) * p, minlength=n_conf_bins)
    hits = np.bincount(which, weights=pos, minlength=n_conf_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return conf / count, hits / count, count


def plot_reliability(
    pos: np.ndarray,
    neg: np.ndarray,
    bins: LogitBins,
    temperature: float,
    n_conf_bins: int,
    path: Path,
    title: str,
) -> Path:
    """Reliability diagram before (T = 1) and after temperature scaling, with the pixel share per bin."""
    plt = _pyplot()
    fig, (ax, ax_n) = plt.subplots(2, 1, figsize=(5.5, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfect calibration")
    for t, label, colour in (
        (1.0, "before (T = 1)", "tab:red"),
        (temperature, f"after (T = {temperature:.2f})", "tab:blue"),
    ):
        conf, freq, count = reliability_curve(pos, neg, bins, t, n_conf_bins)
        ok = count > 0
        ax.plot(conf[ok], freq[ok], marker="o", color=colour, label=label)
        centres = (np.arange(n_conf_bins) + 0.5) / n_conf_bins
        ax_n.bar(centres, count / count.sum(), width=1.0 / n_conf_bins, alpha=0.4, color=colour)
    ax.set_ylabel("observed RTS frequency")
    ax.set_title(title)
    ax.legend(loc="upper left")
    ax_n.set_yscale("log")
    ax_n.set_xlabel("predicted probability")
    ax_n.set_ylabel("pixel share")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_pr_curves(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray, LogitBins]],
    points: Sequence[tuple[str, float, float]],
    path: Path,
    title: str,
) -> Path:
    """PR curves (label -> (pos, neg, bins) weighted histograms) and operating points (label, recall, precision)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 5))
    for label, (pos, neg, bins) in curves.items():
        if pos.sum() <= 0:
            continue
        c = precision_recall_curve_from_hist(pos, neg, bins)
        ax.plot(c.recall, c.precision, label=label)
    for label, recall, precision in points:
        ax.scatter([recall], [precision], marker="*", s=120, zorder=3, label=label)
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
