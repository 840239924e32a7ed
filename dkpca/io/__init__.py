"""Inputs: open every readable format lazily, validate, fingerprint.

* :mod:`.formats` -- which format a path is, and a lazy row-sliceable array for each
  (Zarr, ``.npy``, HDF5, netCDF/xarray, Parquet, CSV);
* :mod:`.inputs` -- any input (path or Python object) as a validated, row-chunked
  dask array; the one-pass finiteness check and fingerprint.
"""

from .formats import READABLE, input_path, split_member
from .inputs import Fingerprint, as_dask, open_input, scan

__all__ = ["open_input", "as_dask", "scan", "Fingerprint", "READABLE", "input_path", "split_member"]
