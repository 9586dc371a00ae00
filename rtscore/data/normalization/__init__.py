"""Normalization statistics (guide §4.5): computed over the train split in one pass, the stats file, and the input
transform that applies them.
"""
