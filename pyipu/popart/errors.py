"""PopART's exception classes, as pyipu errors (catch either name)."""

from __future__ import annotations

from pyipu.errors import Error, InvalidArgumentError, InvalidStateError, OutOfMemoryError


class popart_exception(InvalidArgumentError):  # noqa: N801 - PopART's name
    """Misuse of the PopART API: an unknown tensor id, a wrong shape or dtype, a bad option."""


class popart_internal_exception(Error):  # noqa: N801
    """Something pyipu did not expect (a bug): please report it."""


class poplar_exception(InvalidStateError):  # noqa: N801
    """A session used out of order: `run` before `prepareDevice`, a closed session."""


class OutOfMemoryException(popart_exception, OutOfMemoryError):
    """`prepareDevice`: the model does not fit in the IPU's tile memory (IPU Model)."""

    def getSummaryReport(self) -> str:  # noqa: N802
        return str(self)
