"""Marker values of the outcome hashing (spec §3.3), kept in plain Python.

``ErrorMessage`` subclasses ``str``, which mypyc does not compile, so these live outside the
compiled modules (see ``setup.py``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["MISSING", "ErrorMessage"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: "the tool returned nothing" / "nothing was thrown"
MISSING: Final = _Missing()


class ErrorMessage(str):
    """A thrown ``Error`` whose message is this string (an empty message hashes as ``Error``)."""

    __slots__ = ()
