"""The error every stage may raise for a mistake the user can fix: the command line prints it as one
line with no traceback (``gpuprof.cli``), the Python API lets it propagate."""


class UserError(Exception):
    """A mistake the user can fix: printed as one line, no traceback."""
