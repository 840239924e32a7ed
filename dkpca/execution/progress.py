"""A computation's progress: a tqdm bar on a terminal or in Jupyter, else lines on stderr, or a callback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from distributed.utils import is_kernel
from tqdm import tqdm

__all__ = ["Progress", "ProgressCallback"]

#: ``callback(label, done, total)``: a computation's progress, in tasks
ProgressCallback = Callable[[str, int, int], None]

#: percent between two progress lines when stderr is not a terminal
_LINE_STEP = 10


class Progress:
    """One computation's progress: a tqdm bar on a terminal or in Jupyter, else lines on stderr, or a callback."""

    def __init__(self, label: str, how: bool | ProgressCallback) -> None:
        self.label, self.total, self.done = label, 0, 0
        self.callback = how if callable(how) else None
        self.bar = None
        self.printed = 0  # percent of the last line written (not a terminal)

    def start(self, total: int) -> None:
        """The computation has ``total`` tasks."""
        self.total = int(total)
        if self.callback is not None:
            self.callback(self.label, 0, self.total)
            return
        self.bar = _bar(self.label, self.total)
        if self.bar is None:
            print(f"dkpca: {self.label}: {self.total} tasks", file=sys.stderr, flush=True)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.callback is not None:
            self.callback(self.label, self.done, self.total)
        elif self.bar is not None:
            self.bar.update(n)
        else:
            pct = 100 * self.done // max(1, self.total)
            if pct >= self.printed + _LINE_STEP or (self.done >= self.total and self.printed < 100):
                self.printed = 100 if self.done >= self.total else pct - pct % _LINE_STEP
                print(f"dkpca: {self.label}: {pct}% ({self.done}/{self.total})", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _bar(label: str, total: int) -> Any | None:
    """A live bar where someone watches (Jupyter with ipywidgets, a terminal), else None."""
    if is_kernel():
        try:
            import ipywidgets  # noqa: F401 - optional: the widget needs it
            from tqdm.notebook import tqdm as notebook_tqdm
        except ImportError:
            pass
        else:
            return notebook_tqdm(total=total, desc=label, unit="task")
    if sys.stderr.isatty():
        return tqdm(total=total, desc=label, unit="task", file=sys.stderr, dynamic_ncols=True, leave=True)
    return None
