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


class CompileError(CorefoldError):
    """A (sub)graph does not fit the target: one resource ran out (SPEC M1 §6).

    Serial partitioning splits a subgraph when compiling it raises this; the fields say
    which resource, where, how much was needed and what the limit is.

    Attributes:
        resource: ``"SRAM"``, ``"instruction memory"``, ``"NoC buffers"`` (all in bytes)
            or ``"core count"`` (a count).
        where: the place that ran out, e.g. ``"core (3,5)"`` or ``"target 'corefold-npu'"``.
        need: the amount needed.
        limit: the amount available.
        detail: optional words on what needed it (an operator, a tensor).
    """

    BYTE_RESOURCES = ("SRAM", "instruction memory", "NoC buffers")

    def __init__(self, resource: str, where: str, need: float, limit: float, detail: str = ""):
        self.resource = resource
        self.where = where
        self.need = need
        self.limit = limit
        self.detail = detail
        if resource in self.BYTE_RESOURCES:
            amounts = f"{format_bytes(need)} needed, {format_bytes(limit)} available"
        else:
            amounts = f"{need:g} needed, {limit:g} available"
        super().__init__(f"{resource} of {where}: {amounts}" + (f" ({detail})" if detail else ""))

    def __reduce__(self):  # picklable across process pools (M1 compiles in parallel)
        return (type(self), (self.resource, self.where, self.need, self.limit, self.detail))


def format_bytes(n: float) -> str:
    """``n`` bytes in GiB, MiB or KiB with one decimal, or whole bytes below 1 KiB."""
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


class InternalError(Exception):
    """An invariant of corefold itself is broken: a bug, never the user's fault.

    Not a :class:`CorefoldError`: the command line reports it as an internal error
    ("please report") with exit status 70 (``EX_SOFTWARE``), never as bad input (2).
    """


#: Exit statuses of the command line.
EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 70
