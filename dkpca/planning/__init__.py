"""Planning above the solvers: measurements, the ``auto`` choice, time estimates and the printable plan."""

from .auto import SMALL_GRAM_BYTES, Choice, choose, use_compiled_exp
from .decision import SERIAL_ALGEBRA_MAX_WIDTH, FitPlan, GramMode, StartPolicy, decide, instead_of_arpack, start_policy
from .estimate import SCHEDULER_SECONDS_PER_TASK, EntryRates, choose_block, estimate
from .inmemory import DENSE_MAX_N, in_memory_solver
from .measure import estimate_passes, lanczos_passes, measure_blocks
from .plan import Plan, make_plan, plan
from .precision import DTYPES, Precision, PrecisionWarning, choose_precision, memory_precision, sample_rows
from .resources import cluster_resources

__all__ = ["instead_of_arpack", "DENSE_MAX_N", "SMALL_GRAM_BYTES", "Choice", "choose", "in_memory_solver",
           "use_compiled_exp",
           "estimate_passes", "lanczos_passes", "measure_blocks", "Plan", "cluster_resources", "make_plan", "plan",
           "SCHEDULER_SECONDS_PER_TASK", "EntryRates", "choose_block", "estimate", "DTYPES", "Precision",
           "PrecisionWarning", "choose_precision", "memory_precision", "sample_rows", "FitPlan", "GramMode",
           "StartPolicy", "decide", "start_policy", "SERIAL_ALGEBRA_MAX_WIDTH"]
