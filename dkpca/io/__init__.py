"""Inputs: open every readable format lazily, validate, fingerprint.

* :mod:`.formats` -- which format a path is, and a lazy row-sliceable array for each
  (Zarr, ``.npy``, HDF5, netCDF/xarray, Parquet, CSV);
* :mod:`.inputs` -- any input (path or Python object) as a validated, row-chunked
  dask array; the one-pass finiteness check and fingerprint; a data frame's feature names.
"""

from .formats import READABLE, input_path, split_member
from .inputs import Fingerprint, as_dask, check_feature_names, feature_names, open_input, read_feature_names, scan

__all__ = ["open_input", "as_dask", "scan", "Fingerprint", "READABLE", "input_path", "split_member", "feature_names",
           "check_feature_names", "read_feature_names"]
