"""From tile sources to training batches: the sources, the torch Dataset, transforms, the balanced curriculum sampler
and the one DataLoader builder.
"""
