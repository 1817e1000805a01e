"""The error every `hsi` subcommand raises on bad arguments or unreadable input (its own module, so that the
subcommand modules need not import cli/main.py, which imports them)."""


class UsageError(Exception):
    """A bad argument or unreadable input: printed as one line, exit code 2."""
