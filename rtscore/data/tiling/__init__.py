"""`rts tile`: GeoTIFF scenes and an RTS polygon inventory cut into a data root's tile layout (run, plan, scenes,
inventory, pixels, files, resume state).
"""
