"""`rts tile`: GeoTIFF scenes and an RTS polygon inventory cut into a data root's tile layout (run, plan, scenes,
inventory, pixels, files, resume state), and the split rules it was cut with checked against a pipeline config's.
"""
