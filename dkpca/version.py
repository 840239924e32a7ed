"""dkpca's version, in a module of its own so that any layer can read it without importing the package."""

__version__ = "0.1.0"


def installed_version() -> str:
    """The version of the dkpca a process imports: run on a cluster's workers, it fails there where they cannot
    import dkpca (pickled by reference, it is unpickled by importing this module)."""
    return __version__
