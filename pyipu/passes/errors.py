"""Errors of the pass registry and the built-in passes (all `pyipu.Error` and `CompileError`)."""

from __future__ import annotations

from pyipu.compiler.errors import CompileError


class PassError(CompileError):
    """A pass cannot be applied to the model as given."""


class UnknownPassError(PassError, LookupError):
    """A pass name that is not registered; the message lists the registered ones."""


class PassRegistrationError(PassError):
    """A pass name registered twice (use `Pass.override_register_pass`) or a bad constraint."""


class PassConstraintError(PassError):
    """The requested passes violate an 'against' constraint, or 'before'/'depend' form a cycle."""


class Int64OverflowError(PassError, OverflowError):
    """int64_to_int32: a constant holds a value outside the int32 range."""
