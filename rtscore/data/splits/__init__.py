"""Spatial blocking between splits (guide §10.1): regions assigned to splits, and tile footprints kept apart by
ground distance.
"""
