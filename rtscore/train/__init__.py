"""Training: loop, EMA, LR schedule, early stopping, checkpoints, determinism."""
