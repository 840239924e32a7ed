"""``python -m dkpca.cli``: the ``dkpca`` command (as ``python -m dkpca``)."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
