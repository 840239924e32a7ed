"""Where a fit's K lives, as a typed value (:class:`GramMode`): stored, recomputed every pass, or in memory.

Its own module, importing nothing, so that every layer -- the command line
(whose ``--help`` loads no Dask), the request, the model, the planner -- can
name a Gram mode without comparing strings.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["GramMode", "NO_GRAM"]

#: where a fit forms no K at all (Nystroem: n x m kernel slices only): ``report["gram"]["mode"]``, the plan's
#: and the report's ``gram`` -- a recorded name, not a mode a user can ask for
NO_GRAM = "none"


class GramMode(StrEnum):
    """K written to the store once and read each pass, re-evaluated from X every pass, or held in memory.

    A ``StrEnum``: its value is what users pass (``gram="store"``) and what
    ``model.report["gram"]["mode"]`` records; ``GramMode("store")`` converts a
    user's string at the boundary (request, planning).
    """

    STORE = "store"
    RECOMPUTE = "recompute"
    MEMORY = "memory"
