"""Rasters in and out: the one reader of input rasters (bands), ground size of pixels, vector labels burnt onto
a raster grid, and scenes warped onto a model's tile grid.
"""
