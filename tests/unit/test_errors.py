"""The one exception tree (lazyd/errors.py): the drawing in its docstring is the tree in the code.

What each error does for a user is tested where it is raised: lazyctl's exit statuses in e2e
`test_lazyctl.py`, the shim's refused options in e2e `test_shim_standalone.py`, spawn errors in
e2e `test_process.py`, one-line config errors in unit `test_config.py`; that every exception descends
from `LazydError` is a rule of tests/unit/test_architecture.py.
"""

from __future__ import annotations

import re

from lazyd import errors

# "    │   ├── UsageError        text": the column where the name starts gives its depth, 4 a level.
_DRAWN = re.compile(r"^    [│├└─ ]*(?P<name>[A-Z][A-Za-z]+)\s")


def drawn_tree() -> dict[str, str | None]:
    """Each class drawn in the docstring, mapped to the class drawn as its parent."""
    doc = errors.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\n", 2)[1]
    parents: dict[str, str | None] = {}
    path: list[str] = []
    for line in block.splitlines():
        match = _DRAWN.match(line)
        if match is None:
            continue  # a continuation line of a description
        depth = (match.start("name") - 4) // 4
        del path[depth:]
        parents[match["name"]] = path[-1] if path else None
        path.append(match["name"])
    return parents


def test_the_docstring_draws_every_exception_class_under_its_real_parent() -> None:
    classes = {name: obj for name, obj in vars(errors).items()
               if isinstance(obj, type) and issubclass(obj, BaseException)}
    real = {name: next((b.__name__ for b in cls.__bases__ if b.__module__ == errors.__name__), None)
            for name, cls in classes.items()}
    assert drawn_tree() == real
