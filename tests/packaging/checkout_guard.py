"""Copied by ``tests/packaging/check.sh`` into the site-packages of the virtual environment where
the checkout's tests run against an installed loopwatch, with a ``.pth`` line that installs it in
every Python process of that environment (the tests' children too, whatever their environment
variables): ``import loopwatch`` there finds the installed package, never the checkout's
``loopwatch/`` folder, even where the checkout is on ``sys.path`` (pytest puts it first; a test
starts ``python -m loopwatch`` from it). It imports only what the interpreter loads at start."""

import os
import sys

TYPE_CHECKING = False  # (typing is not imported for it: a hook's start is measured)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

#: the import system's own path finder (importlib.machinery's, without importing importlib)
PathFinder = next(finder for finder in sys.meta_path if getattr(finder, "__name__", "") == "PathFinder")

__all__ = ["CheckoutGuard", "install"]


class CheckoutGuard:
    """Finds ``loopwatch`` on ``sys.path`` without the checkout."""

    def __init__(self, checkout: str) -> None:
        self.checkout = os.path.realpath(checkout)

    def find_spec(
        self, name: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if name != "loopwatch":
            return None
        elsewhere = [entry for entry in sys.path if os.path.realpath(entry or ".") != self.checkout]
        spec = PathFinder.find_spec(name, elsewhere)
        if spec is None:
            raise ModuleNotFoundError(
                f"loopwatch is not installed here (not the checkout's: {self.checkout})"
            )
        return spec


def install(checkout: str) -> None:
    """From now on, in this process, ``loopwatch`` is never ``checkout``'s."""
    if not any(isinstance(finder, CheckoutGuard) for finder in sys.meta_path):
        sys.meta_path.insert(0, CheckoutGuard(checkout))
