"""The base of the errors a user can act on (bad input, missing stage, refused numerics): the CLI prints them
as one line instead of a traceback. Light on purpose: importing it imports nothing else."""


class PipelineError(RuntimeError):
    """A stage cannot run as asked; the message names the file, field or tile and what to do."""
