"""The exceptions of qfold: one class per kind of failure, each carrying the
library's one-line message (qf_error_message()) and its status name.

    Error                 every failure of the library
      InputError          bad input (a file, an array, an option): what the CLI
                          exits 2 for (QF_ERR_IO, _PARSE, _UNSUPPORTED, _INVALID,
                          _SHAPE, _NUMERIC); also a ValueError
      ProcessingError     the work failed (exit status 1); also a RuntimeError
        MismatchError     a verification failed (QF_ERR_MISMATCH)
        Interrupted       stopped on request (QF_ERR_INTERRUPTED): the model keeps
                          what was done so far
        DivergedError     training diverged (QF_ERR_DIVERGED)
      LibraryError        the shared library could not be loaded, or is not the
                          package's version (also an ImportError)
"""

# qf_status codes (include/qfold/status.h), in order.
STATUS_NAMES = ("OK", "IO", "PARSE", "UNSUPPORTED", "INVALID", "SHAPE", "NUMERIC", "NOMEM", "MISMATCH",
                "INTERNAL", "INTERRUPTED", "DIVERGED")
_INPUT = {1, 2, 3, 4, 5, 6}  # the CLI's exit status 2 (src/cli/cli.c, qf_cli_fail)


class Error(Exception):
    """A failure of the qfold library. `message` is the library's one line
    (naming the node, value or option), `status` the qf_status name
    ("INVALID", "SHAPE", ...), `exit_status` what the CLI exits with for it
    (2: bad input, 1: the processing failed)."""

    exit_status = 1

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        self.status = status


class InputError(Error, ValueError):
    """Bad input: an unreadable or malformed model or array, an op, dtype or
    option qfold does not handle, shapes that do not fit (exit status 2)."""

    exit_status = 2


class ProcessingError(Error, RuntimeError):
    """The work itself failed (exit status 1): out of memory, an internal
    error, and the subclasses below."""


class MismatchError(ProcessingError):
    """A verification failed: the rewritten model computes other outputs."""


class Interrupted(ProcessingError):
    """Stopped on request (a callback returned False, or Ctrl-C)."""


class DivergedError(ProcessingError):
    """Training diverged: a loss, gradient or parameter is not finite."""


class LibraryError(Error, ImportError):
    """libqfold could not be loaded, or its version is not the package's."""


def error_for(code, message):
    """The exception for qf_status `code` with the library's message."""
    name = STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else str(code)
    if code in _INPUT:
        cls = InputError
    elif name == "MISMATCH":
        cls = MismatchError
    elif name == "INTERRUPTED":
        cls = Interrupted
    elif name == "DIVERGED":
        cls = DivergedError
    else:
        cls = ProcessingError
    return cls(message or name.lower(), name)
