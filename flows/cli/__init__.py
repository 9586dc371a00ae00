"""The `rts` command-line machinery: the entry point, options derived from parameter models, the library and
flow commands, the pre-flight checks, and docs/commands.md generated from them.
"""
