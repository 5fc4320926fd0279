"""The one error every stub raises, so that a failing test tells the student where to start."""

from __future__ import annotations

HANDOUT = "handout/README.md"


def not_implemented(file: str, function: str, section: str) -> NotImplementedError:
    """Build the error a stub raises: ``raise not_implemented(__file__, "name", "§1.1 ...")``.

    The message names the file (relative to the submission), the function and the handout section.
    """
    relative = file.replace("\\", "/")
    if "cs336_systems/" in relative:
        relative = "cs336_systems/" + relative.rsplit("cs336_systems/", 1)[1]
    return NotImplementedError(
        f"{relative}: {function} is not implemented yet. Implement it as its docstring says "
        f"(see {HANDOUT}, {section})."
    )
