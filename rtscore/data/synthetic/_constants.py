"""Constants shared by the synthetic scene modules."""

_PLAN_SALT = 0x9A1A7  # any fixed constant: keeps the plan shuffle independent of tile streams
_MID = 4  # smooth fields are built on a grid this much coarser than the tile, then upsampled
_N_HARMONICS = 7
_PART_NAMES = ("headwall", "floor", "tongue", "bare", "water", "road", "cloud")
_META_KEYS = (
    "n_hard_negatives",
    "has_cloud",
    "has_partial_nodata",
    "has_dark_pixels",
    "n_partial_objects",
    "sun_azimuth_deg",
    "sun_elevation_deg",
)
_RING = 1  # objects are rasterised one pixel beyond the tile to detect those cut by its edge
