"""A pass's task graph written directly in dask's task specification.

A solver pass or a Gram build is a few thousand tasks of known shape: pieces
of a matrix V, one task per block (or per worker's share of blocks), and
tree sums per row block.  Built call by call with ``dask.delayed``, each task
cost the client about 5 ms (measured: 13.4 s for the 2,573 tasks of one pass
at n = 10^6, block 16384; cProfile puts the time in ``unpack_collections``,
tokenising the arguments and simplifying an expression per call), more than
the scheduler's own work per task.  :class:`TaskGraph` writes the same
tasks as :mod:`dask.task_spec` nodes into a ``HighLevelGraph``: a task costs
a dict entry, its dependencies are the references it names.

Tasks made inside ``dask.annotate(...)`` (``execution.placed``) carry those
annotations: they go into one layer per function and distinct annotation,
which is how the distributed scheduler receives them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import dask
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from dask.task_spec import DataNode, GraphNode, List, Task, TaskRef

__all__ = ["TaskGraph"]


def _node(arg: Any) -> Any:
    """``arg`` as a task argument: lists holding references become graph lists; anything else is a literal."""
    if isinstance(arg, list):
        items = [_node(a) for a in arg]
        return List(*items) if any(isinstance(a, (TaskRef, GraphNode)) for a in items) else items
    return arg


class TaskGraph:
    """Tasks added one by one; :meth:`outputs` turns any of them into delayed objects to compute.

    Parameters
    ----------
    name : str
        Prefix of the task keys (shown on the dashboard); a fresh suffix keeps
        every graph's keys apart.
    inputs : sequence of dask collections
        Collections whose keys the tasks refer to (:meth:`ref`), e.g. the row
        blocks of X from ``Array.to_delayed()``.
    """

    def __init__(self, name: str, inputs: Sequence[Any] = ()) -> None:
        self.prefix, self.token = name, uuid.uuid4().hex
        self.name = f"{name}-{self.token}"
        inputs = list(inputs)
        self._graph = HighLevelGraph.merge(*(c.__dask_graph__() for c in inputs)) if inputs else None
        self._input_layers = set(self._graph.layers) if self._graph is not None else set()
        self._layers: dict[str, dict] = {}
        self._annotations: dict[str, dict] = {}
        self._layer_of: dict[Any, str] = {}
        self._deps: dict[str, set[str]] = {}
        self._count = 0

    def ref(self, collection: Any) -> TaskRef:
        """A reference to one of ``inputs``'s keys (a ``Delayed``)."""
        return TaskRef(collection.key)

    def data(self, value: Any) -> TaskRef:
        """``value`` as a graph node (sent with the graph once; tasks refer to it)."""
        key = self._key("data")
        self._add("data", key, DataNode(key, value))
        return TaskRef(key)

    def task(self, func: Callable, *args: Any, key: Any = None) -> TaskRef:
        """``func(*args)`` as a task; ``args`` may hold references (:meth:`data`, :meth:`ref`, tasks), in lists too.

        ``key`` names the task (unique within the cluster's work); by default
        the function's name, this graph's name and a counter.
        """
        label = getattr(func, "__name__", "task")
        key = key if key is not None else self._key(label)
        self._add(label, key, Task(key, func, *(_node(a) for a in args)))
        return TaskRef(key)

    def outputs(self, refs: Sequence[TaskRef]) -> list[Delayed]:
        """Delayed objects for ``refs``, all sharing this graph (compute them together)."""
        layers = dict(self._graph.layers) if self._graph is not None else {}
        deps = {k: set(v) for k, v in self._graph.dependencies.items()} if self._graph is not None else {}
        for name, tasks in self._layers.items():
            layers[name] = MaterializedLayer(tasks, annotations=self._annotations[name] or None)
            deps[name] = self._deps[name]
        graph = HighLevelGraph(layers, deps)
        return [Delayed(r.key, graph, layer=self._layer_of[r.key]) for r in refs]

    # -- internals ----------------------------------------------------------
    def _key(self, label: str) -> tuple[str, int]:
        self._count += 1
        # the graph's name first: the dashboard groups tasks by the key's words before the hex token
        # ("dkpca-pass-group_products") and cuts long names, so dkpca's stage stays readable
        return (f"{self.prefix}-{label}-{self.token}", self._count)

    def _add(self, label: str, key: Any, node: GraphNode) -> None:
        # One layer per function and annotations: layers must form a DAG
        # (culling walks them in order), and a function's tasks only ever
        # depend on earlier functions' or on their own (tree sums).
        annotations = dask.get_annotations()
        layer = f"{self.prefix}-{label}-{self.token}-{_annotation_label(annotations)}"
        if layer not in self._layers:
            self._layers[layer], self._annotations[layer], self._deps[layer] = {}, dict(annotations), set()
        self._layers[layer][key] = node
        self._layer_of[key] = layer
        for dep in node.dependencies:
            owner = self._layer_of.get(dep)
            if owner is None:  # one of the inputs' keys: depend on their layers (finding the one is a scan)
                self._deps[layer] |= self._input_layers
            elif owner != layer:
                self._deps[layer].add(owner)


def _annotation_label(annotations: dict) -> str:
    """A stable name for one set of annotations (tasks with equal annotations share a layer)."""
    return repr(sorted((k, repr(v)) for k, v in annotations.items())) if annotations else "plain"
