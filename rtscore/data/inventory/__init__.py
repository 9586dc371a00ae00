"""RTS inventories: ARTS (the community's Arctic Retrogressive Thaw Slumps data set) and other polygon files, read
into one typed form for `rts tile`, review ingest and evaluation (docs/inventories.md)."""
