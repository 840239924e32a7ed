"""``python -m dkpca`` and the ``dkpca`` console script (``dkpca.__main__:main``).

The command line is imported inside :func:`main`: importing it (numpy and the
registries, 0.3-0.6 s) is a window in which Ctrl-C met no handler and printed
a traceback.  This module imports nothing of dkpca at its top, so the whole
start is covered.

Once the command has returned, every object left is frozen (``gc.freeze``):
the interpreter's teardown then skips collecting them, which took 0.35-0.6 s
of every command (0.41 s after importing only its libraries, 0.63 s after
the demo), a window in which Ctrl-C or SIGTERM killed the finished process
by the signal, without a line.  The command's files are closed and written
by then; atexit handlers (a cluster's, ``weakref.finalize``) still run.
"""

import gc
import sys


def main() -> int:
    """The ``dkpca`` command: :func:`dkpca.cli.main`, with Ctrl-C while it loads one line and status 130."""
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        print("dkpca: interrupted", file=sys.stderr)
        return 130
    status = run()
    gc.freeze()
    return status


if __name__ == "__main__":
    sys.exit(main())
