"""``python -m dkpca`` and the ``dkpca`` console script (``dkpca.__main__:main``).

The command line is imported inside :func:`main`: importing it (numpy and the
registries, 0.3-0.6 s) is a window in which Ctrl-C met no handler and printed
a traceback.  This module imports nothing of dkpca at its top, so the whole
start is covered.
"""

import sys


def main() -> int:
    """The ``dkpca`` command: :func:`dkpca.cli.main`, with Ctrl-C while it loads one line and status 130."""
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        print("dkpca: interrupted", file=sys.stderr)
        return 130
    return run()


if __name__ == "__main__":
    sys.exit(main())
