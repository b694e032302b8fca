"""User-facing errors.

Every error a user can cause (bad model, bad target, bad data, impossible request) is a
:class:`CorefoldError`. The command line prints its message on one line and exits with
status 2; nothing else is caught, so a traceback always means a corefold bug.
"""


class CorefoldError(Exception):
    """An error caused by the user's input; its message names the culprit."""


class ModelError(CorefoldError):
    """The model file is unreadable, malformed or uses something unsupported."""


class UnsupportedOpError(ModelError):
    """A node uses an operator (or an attribute of it) that corefold cannot handle."""


class ShapeError(ModelError):
    """A value's shape is unknown or a dynamic dimension is unbound."""


class TargetError(CorefoldError):
    """A target description is malformed or describes an impossible chip."""


class DataError(CorefoldError):
    """Input or calibration data does not match what the model expects."""


class CapacityError(CorefoldError):
    """Something can never fit the target, at any split or placement."""


class InternalError(Exception):
    """An invariant of corefold itself is broken: a bug, never the user's fault.

    Not a :class:`CorefoldError`: the command line reports it as an internal error
    ("please report") with exit status 70 (``EX_SOFTWARE``), never as bad input (2).
    """


#: Exit statuses of the command line.
EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 70
