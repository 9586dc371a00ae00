"""Ablation sweeps (guide §3, §13.1): variants of a base config, each trained over the same seeds, judged against
the baseline within seed noise; the stages variants share are computed once (the stage registry decides)."""
