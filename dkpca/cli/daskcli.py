"""``dask dkpca ...``: dkpca's command under Dask's, registered as a ``dask_cli`` entry point.

The ``dask`` command loads the ``dask_cli`` entry points of the installed
packages (distributed's ``dask scheduler``, ``dask worker``) before it runs
any subcommand; loading this one imports :mod:`dkpca.config`, which gives
dkpca's defaults (``dkpca/dkpca.yaml``) to Dask, so ``dask config get dkpca``
shows dkpca's settings as ``dask config get distributed`` shows
distributed's.  ``dask dkpca fit ...`` is ``dkpca fit ...``.
"""

from __future__ import annotations

import click

from .. import config  # noqa: F401 -- registers dkpca's Dask defaults: what this entry point is loaded for

__all__ = ["dkpca"]


@click.command(name="dkpca", add_help_option=False,
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def dkpca(args: tuple[str, ...]) -> None:
    """Kernel PCA out of core (the dkpca command; dask dkpca --help)."""
    from . import main

    raise SystemExit(main(list(args)))
