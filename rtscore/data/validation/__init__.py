"""Pre-training data validation (guide §10.1): the run, its DataLoader and store checks, the typed report and the
sample grid.
"""
