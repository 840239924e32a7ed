"""Where a fit's K lives, as a typed value (:class:`GramMode`): stored, recomputed every pass, or in memory.

Its own module, importing nothing, so that every layer -- the command line
(whose ``--help`` loads no Dask), the request, the model, the planner -- can
name a Gram mode without comparing strings.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["GramMode"]


class GramMode(StrEnum):
    """K written to the store once and read each pass, re-evaluated from X every pass, or held in memory.

    A ``StrEnum``: its value is what users pass (``gram="store"``) and what
    ``model.report["gram"]["mode"]`` records; ``GramMode("store")`` converts a
    user's string at the boundary (request, planning).
    """

    STORE = "store"
    RECOMPUTE = "recompute"
    MEMORY = "memory"
