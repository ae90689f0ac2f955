"""Keys that look like a typo of a key loopwatch reads (``tools.loopdetection``, ``tool:``).

OpenClaw's config has many keys loopwatch ignores, so an unknown key is no error. But a key
that differs from one loopwatch reads only in case or by one letter is most likely a typo
that silently turns detection off; it deserves a warning that names the key meant.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["near_misses"]

#: where loopwatch reads keys: (path of the object, the keys read there)
_READ: Final = (
    ("", ("tools", "agents", "loopwatch")),
    ("agents", ("list", "entries")),
    ("*", ("tools", "loopwatch")),  # an agent entry
    ("tools", ("loopDetection",)),
)
#: real OpenClaw keys that are one letter from a key loopwatch reads
_LEGITIMATE: Final = frozenset({"agent"})


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` becomes ``b`` by one insertion, deletion or substitution."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i:] == b[i + 1 :] or (len(a) == len(b) and a[i + 1 :] == b[i + 1 :])


def _meant(key: str, known: tuple[str, ...]) -> str | None:
    if key in known or key in _LEGITIMATE:
        return None
    folded = key.casefold()
    for name in known:
        wanted = name.casefold()
        if (
            folded == wanted
            or (len(name) >= 4 and _one_edit(folded, wanted))
            or (wanted.endswith("ies") and folded == wanted[:-3] + "y")  # entry for entries
        ):
            return name
    return None


def _agent_entries(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every agent entry (``agents.list[i]``, ``agents.entries.<id>``) with its path."""
    agents = document.get("agents")
    if not isinstance(agents, dict):
        return []
    found: list[tuple[str, dict[str, Any]]] = []
    listed = agents.get("list")
    for index, entry in enumerate(listed if isinstance(listed, list) else []):
        if isinstance(entry, dict):
            found.append((f"agents.list[{index}]", entry))
    entries = agents.get("entries")
    for agent, entry in entries.items() if isinstance(entries, dict) else []:
        if isinstance(entry, dict):
            found.append((f"agents.entries.{agent}", entry))
    return found


def _objects(document: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """The objects at ``path`` (top level, ``agents``, ``tools`` globally and in every agent
    entry, ``*`` for the agent entries themselves)."""
    if not path:
        return [("", document)]
    if path == "*":
        return _agent_entries(document)
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(document.get(path), dict):
        found.append((path, document[path]))
    if path == "tools":
        for where, entry in _agent_entries(document):
            if isinstance(entry.get(path), dict):
                found.append((f"{where}.{path}", entry[path]))
    return found


def near_misses(document: object) -> list[str]:
    """A warning per key that looks like a typo of a key loopwatch reads."""
    if not isinstance(document, dict):
        return []
    warnings = []
    if not any(key in document for key in ("tools", "agents", "loopwatch")):
        warnings.append(
            "sets nothing loopwatch reads (tools.loopDetection, agents, loopwatch): with this file "
            "loop detection is off"
        )
    for path, known in _READ:
        for where, obj in _objects(document, path):
            for key in obj:
                meant = _meant(str(key), known)
                if meant is not None:
                    at = f"{where}.{key}" if where else str(key)
                    should = f"{where}.{meant}" if where else meant
                    warnings.append(f"{at}: did you mean `{should}`? (ignored: loopwatch reads `{should}`)")
    return warnings
