"""Scalar arguments (counts, ranks, scales) checked before they reach the library, so that a bad
one is reported by name as the library reports arrays: "argument (kind): expected ..., got ..."."""

import numbers
import operator

_INT32_MAX = 2**31 - 1


def argument_error(exc_type, argument, kind, expected, actual):
    """An exception of exc_type shaped like the library's errors, with the same attributes."""
    exc = exc_type(f"{argument} ({kind}): expected {expected}, got {actual}")
    exc.argument, exc.expected, exc.actual, exc.kind = argument, expected, actual, kind
    return exc


def index(value, argument):
    """value as an int32-range int (numpy integers too); bool, float or str are a TypeError."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise argument_error(
            TypeError, argument, "dtype mismatch", "an integer", type(value).__name__
        )
    result = operator.index(value)
    if not -_INT32_MAX - 1 <= result <= _INT32_MAX:
        raise argument_error(
            ValueError, argument, "out of range", "an integer that fits int32", result
        )
    return result


def optional_index(value, argument):
    """None, or index(value, argument)."""
    return None if value is None else index(value, argument)


def real(value, argument):
    """value as a float (ints and numpy floats too); the library checks its range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise argument_error(
            TypeError, argument, "dtype mismatch", "a real number", type(value).__name__
        )
    try:
        return float(value)
    except OverflowError:
        raise argument_error(
            ValueError, argument, "out of range", "a real number within float range", value
        ) from None


def string(value, argument):
    """value, a str (the library checks which)."""
    if not isinstance(value, str):
        raise argument_error(
            TypeError, argument, "dtype mismatch", "a string", type(value).__name__
        )
    return value
