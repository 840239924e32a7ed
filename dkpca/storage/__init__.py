"""Everything dkpca keeps on disk: the only code that knows the store's layout.

* :mod:`.fitstore` -- a fit's store (create, open, check, model switch);
* :mod:`.datacopy` -- the copy of the training data (written once, fenced, every read verified);
* :mod:`.lock` -- one writer at a time;
* :mod:`.integrity` -- a CRC-32C on every chunk, checked on every read; :class:`CorruptChunkError`;
* :mod:`.chunks` -- whole-chunk reads and writes, the raw fast path and O_DIRECT;
* :mod:`.gramstore` -- K's blocks, sums and done markers;
* :mod:`.diskspace` -- what a stored fit needs on disk, refused before anything is written;
* :mod:`.checkpoint` -- solver state for resuming a killed fit;
* :mod:`.modelrecord` -- what a model group records of its arrays (digests), checked by every read;
* :mod:`.verify` -- check a whole store, say what a rerun would recompute.
"""

from .checkpoint import CheckpointState, SolverCheckpoint
from .chunks import ChunkReader, ChunkWriter, chunk_file, use_direct_io, write_direct
from .datachunks import held_as
from .diskspace import InsufficientDiskSpace, check_disk_space, fit_footprint, gram_bytes
from .fitstore import FORMAT, FORMAT_VERSION, FitStore, json_safe, remove_member
from .gramstore import GramInfo, GramStore, GramWriters, probe_array
from .integrity import CorruptChunkError, checksum_codecs, create_array, has_checksum
from .lock import LOCK_NAME, Lease, LeaseLostError, StoreLockedError
from .modelrecord import EDITED, DamagedModelError, edited
from .paths import absolute, check_apart, check_output, exists, free_bytes, is_url, relation, without_local_scheme
from .verify import Finding, verify_store

__all__ = ["CheckpointState", "SolverCheckpoint", "ChunkReader", "ChunkWriter", "CorruptChunkError", "create_array",
           "checksum_codecs", "has_checksum", "chunk_file", "use_direct_io",
           "write_direct", "FORMAT", "FORMAT_VERSION", "FitStore", "free_bytes", "is_url", "json_safe",
           "remove_member", "GramInfo", "GramStore", "GramWriters", "InsufficientDiskSpace", "check_disk_space",
           "gram_bytes", "fit_footprint", "probe_array", "LOCK_NAME", "StoreLockedError", "Lease", "LeaseLostError",
           "DamagedModelError", "EDITED", "edited",
           "absolute", "check_apart", "check_output", "relation", "exists", "Finding", "verify_store",
           "without_local_scheme", "held_as"]
