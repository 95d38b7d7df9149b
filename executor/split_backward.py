"""Split a pipeline stage's backward pass into an input-gradient part (I) and a weight part (W).

Zero-bubble pipeline schedules fill bubbles by running a stage's backward in two pieces: **I**
computes only the gradient with respect to the stage input (the next stage upstream is waiting
for it), and **W**, scheduled later into an otherwise idle slot, computes the weight gradients.
Ordinary autograd does both at once (the **B** action, :func:`backward_full`).

How the split works. In the autograd graph of one forward pass (edges point from an output
towards the leaves), call *input path* every node from which a stage input can be reached: I
has to run exactly these. A parameter's gradient leaves that path at some nodes, the
*intermediates* (for ``nn.Linear`` the ``AddmmBackward`` node, whose outputs are dX, dW and
db). :func:`backward_input` runs autograd towards the inputs only, so every node computes only
the outputs that lead to an input (the engine skips the rest: no dW matmul), and hooks on the
intermediates record the gradients flowing into them. :func:`backward_weight` later restarts
autograd *from the intermediates*, fed the recorded gradients, towards the parameters only, so
the intermediates now compute only their weight outputs (no dX matmul again).

Parameters that share an intermediate, or an output that no input reaches, are processed in
one autograd call (a *group*). When one intermediate of a group lies upstream of another (a
weight used twice along the input path, i.e. weight tying inside the stage), that call must
also run the input path between them; hooks then replace the gradient arriving at each
intermediate by the one recorded in I so nothing is counted twice. That case is correct but
repeats part of the dX work; untied stages (MLPs, transformer blocks) never hit it.

Limits worth knowing:

* Only the listed ``params`` receive gradients; other leaves that require grad get none.
* A custom ``torch.autograd.Function`` sees a fixed ``ctx.needs_input_grad`` (set at forward),
  so its backward computes all its gradients in both I and W (the engine drops the unneeded
  ones): results are right, the split saves nothing inside such a node.
* ``torch.utils.checkpoint(use_reentrant=False)`` works, but its region is recomputed once per
  autograd call: in I and again in every W group that reaches it. The reentrant variant
  refuses ``torch.autograd.grad`` and so cannot be split (torch raises a RuntimeError).
* W must run before the weights change in place (an optimizer step): it refuses otherwise.

Only torch and the standard library are imported, so the module can be used on its own.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import GradientEdge, Node, get_gradient_edge
from torch.utils.hooks import RemovableHandle

__all__ = [
    "WeightGradState",
    "WeightGradStateError",
    "backward_full",
    "backward_input",
    "backward_weight",
]

# Gradients flowing into one autograd node: one entry per output of its forward, None where
# no gradient arrived (or the output does not require one).
_NodeGrads = tuple[torch.Tensor | None, ...]


class WeightGradStateError(RuntimeError):
    """Raised by :func:`backward_weight` when the state cannot (or can no longer) be used.

    The state is single-use: it is consumed by the first :func:`backward_weight` call. It is
    also stale when a parameter was modified in place after :func:`backward_input` (typically an
    optimizer step between I and W, a scheduling bug) or when the graph it refers to was freed
    by another backward pass.
    """


@dataclass(eq=False)
class _Group:
    """Parameters whose weight gradients come out of one autograd call in W.

    ``intermediates`` index into the state's captured gradients; ``root_edges``/``root_grads``
    are stage outputs that no input reaches (their gradient is not on the input path, so it is
    only used in W, as given by the caller).
    """

    params: list[torch.Tensor]
    param_edges: list[GradientEdge]
    intermediates: list[int]
    root_edges: list[GradientEdge] = field(default_factory=list)
    root_grads: list[torch.Tensor] = field(default_factory=list)

    @property
    def needs_clamping(self) -> bool:
        """Whether W may reach one intermediate from another and must stop double counting."""
        return len(self.intermediates) > 1


@dataclass(eq=False)
class WeightGradState:
    """What :func:`backward_input` captured for :func:`backward_weight` (opaque, single-use).

    It holds the intermediate autograd nodes, the gradients that flowed into them during I and
    the parameters to update. Holding it keeps the part of the forward graph that W needs
    alive (the saved activations the weight gradients are computed from); :func:`backward_weight`
    releases all of it. Callers should drop their own references to the stage outputs after
    I, so that the rest of the graph is freed as early as possible.
    """

    _groups: list[_Group] = field(default_factory=list, repr=False)
    _intermediates: list[Node] = field(default_factory=list, repr=False)
    _captured: list[_NodeGrads | None] = field(default_factory=list, repr=False)
    _param_versions: list[tuple[torch.Tensor, int]] = field(default_factory=list, repr=False)
    # In older torch a Python-implemented node (custom autograd.Function) is owned by the C++
    # graph, not by its Python object (torch 2.13 makes the Python object an owner too):
    # keeping the output edges, with their ownership tokens, keeps such nodes alive until W.
    # Empty when no intermediate is such a node.
    _graph_owners: list[GradientEdge] = field(default_factory=list, repr=False)
    _consumed: bool = False

    @property
    def consumed(self) -> bool:
        """True once :func:`backward_weight` has run (or failed) on this state."""
        return self._consumed

    @property
    def num_groups(self) -> int:
        """Autograd calls :func:`backward_weight` will make (0 once consumed)."""
        return len(self._groups)

    @property
    def holds_graph(self) -> bool:
        """Whether the state still references autograd nodes, gradients or parameters."""
        return bool(
            self._groups
            or self._intermediates
            or self._captured
            or self._param_versions
            or self._graph_owners
        )

    def captured_grads(self) -> list[torch.Tensor]:
        """The gradients recorded during I that W starts from (for inspection and tests).

        Empty once consumed; holding the returned list keeps those tensors alive.
        """
        return [g for grads in self._captured if grads is not None for g in grads if g is not None]

    def _release(self) -> None:
        """Drop every reference, so W's graph and the captured gradients can be freed."""
        self._groups = []
        self._intermediates = []
        self._captured = []
        self._param_versions = []
        self._graph_owners = []


# --------------------------------------------------------------------------- argument checks


def _as_tensor_tuple(
    value: torch.Tensor | Sequence[torch.Tensor], what: str
) -> tuple[torch.Tensor, ...]:
    """One tensor or a sequence of tensors, as a tuple; anything else is a caller error."""
    items: tuple[object, ...] = (value,) if isinstance(value, torch.Tensor) else tuple(value)
    checked: list[torch.Tensor] = []
    for i, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            raise TypeError(f"{what}[{i}] must be a torch.Tensor, got {type(item).__name__}")
        checked.append(item)
    return tuple(checked)


def _normalize_outputs(
    outputs: torch.Tensor | Sequence[torch.Tensor],
    grad_outputs: torch.Tensor | Sequence[torch.Tensor | None] | None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Pair each output that requires grad with its incoming gradient.

    Outputs that do not require grad (e.g. an integer mask passed along) carry no gradient and
    are dropped. A missing gradient is only allowed for a one-element output (a loss), where it
    means ones, as in ``torch.autograd.backward``.
    """
    outs = _as_tensor_tuple(outputs, "outputs")
    grads: tuple[torch.Tensor | None, ...]
    if grad_outputs is None:
        grads = (None,) * len(outs)
    elif isinstance(grad_outputs, torch.Tensor):
        grads = (grad_outputs,)
    else:
        grads = tuple(grad_outputs)
    if len(grads) != len(outs):
        raise ValueError(f"got {len(outs)} outputs but {len(grads)} grad_outputs")
    kept_outs: list[torch.Tensor] = []
    kept_grads: list[torch.Tensor] = []
    for i, (out, grad) in enumerate(zip(outs, grads, strict=True)):
        if not out.requires_grad:
            continue
        if grad is None:
            if out.numel() != 1:
                raise ValueError(
                    f"grad_outputs[{i}] is None but outputs[{i}] has shape {tuple(out.shape)}; "
                    "an implicit gradient of ones is only used for one-element outputs (a loss)"
                )
            grad = torch.ones_like(out)
        elif grad.shape != out.shape:
            raise ValueError(
                f"grad_outputs[{i}] has shape {tuple(grad.shape)} but outputs[{i}] has shape "
                f"{tuple(out.shape)}"
            )
        kept_outs.append(out)
        kept_grads.append(grad)
    return kept_outs, kept_grads


def _check_inputs(inputs: torch.Tensor | Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The stage inputs; those that require grad must be leaves (received activations).

    A non-leaf input would make I stop at its grad_fn without running it, and parameters used
    before the stage would then look like they belong to it.
    """
    ins = _as_tensor_tuple(inputs, "inputs")
    for i, inp in enumerate(ins):
        if inp.requires_grad and inp.grad_fn is not None:
            raise ValueError(
                f"inputs[{i}] is not a leaf (grad_fn={type(inp.grad_fn).__name__}); pass the "
                "stage input as a leaf, e.g. received.detach().requires_grad_()"
            )
    return ins


def _check_params(
    params: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """The distinct parameters that require grad (frozen ones get no gradient, as in autograd).

    Duplicates are dropped so a parameter listed twice is not accumulated twice.
    """
    input_ids = {id(t) for t in inputs}
    seen: set[int] = set()
    kept: list[torch.Tensor] = []
    for i, param in enumerate(_as_tensor_tuple(tuple(params), "params")):
        if id(param) in input_ids:
            raise ValueError(
                f"params[{i}] is also one of the inputs; a tensor must be one or the other"
            )
        if not param.requires_grad or id(param) in seen:
            continue
        if param.grad_fn is not None:
            raise ValueError(
                f"params[{i}] is not a leaf (grad_fn={type(param.grad_fn).__name__}); only leaf "
                "tensors can accumulate .grad"
            )
        seen.add(id(param))
        kept.append(param)
    return kept


# --------------------------------------------------------------------------- graph analysis


def _parents_map(roots: Iterable[Node]) -> dict[Node, list[Node]]:
    """Every node reachable from ``roots``, mapped to the nodes that have an edge to it.

    Autograd nodes only know their children (``next_functions``); walking from a parameter
    towards the outputs needs the reverse edges, restricted to this graph (an AccumulateGrad
    node is shared by every graph that uses its parameter).
    """
    parents: dict[Node, list[Node]] = {}
    queue: collections.deque[Node] = collections.deque()
    for root in roots:
        if root not in parents:
            parents[root] = []
            queue.append(root)
    while queue:
        node = queue.popleft()
        for child, _ in node.next_functions:
            if child is None:
                continue
            if child not in parents:
                parents[child] = []
                queue.append(child)
            parents[child].append(node)
    return parents


def _ancestors(starts: Iterable[Node], parents: dict[Node, list[Node]]) -> set[Node]:
    """``starts`` and every node with a path to one of them: the nodes I must run."""
    seen = set(starts)
    queue = collections.deque(seen)
    while queue:
        for parent in parents[queue.popleft()]:
            if parent not in seen:
                seen.add(parent)
                queue.append(parent)
    return seen


def _weight_frontier(
    param_node: Node, parents: dict[Node, list[Node]], input_path: set[Node]
) -> tuple[set[Node], set[Node]]:
    """Walk from a parameter's AccumulateGrad towards the outputs without entering the input path.

    Returns the input-path nodes where the walk stops (the intermediates, whose gradient I
    records) and the visited nodes off the input path (the parameter's own subgraph, needed to
    find outputs that no input reaches).
    """
    intermediates: set[Node] = set()
    visited = {param_node}
    queue = collections.deque(visited)
    while queue:
        for parent in parents[queue.popleft()]:
            if parent in input_path:
                intermediates.add(parent)
            elif parent not in visited:
                visited.add(parent)
                queue.append(parent)
    return intermediates, visited


class _UnionFind:
    """Disjoint sets over 0..n-1, to group parameters that share an intermediate or output."""

    def __init__(self, n: int) -> None:
        self._parent = list(range(n))

    def find(self, i: int) -> int:
        while self._parent[i] != i:
            self._parent[i] = self._parent[self._parent[i]]
            i = self._parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        self._parent[self.find(i)] = self.find(j)


@dataclass
class _WeightGroups:
    """The result of analysing one stage graph: groups and the intermediates they read."""

    groups: list[_Group]
    intermediates: list[Node]


def _group_weights(
    params: Sequence[torch.Tensor],
    root_edges: Sequence[GradientEdge],
    root_grads: Sequence[torch.Tensor],
    parents: dict[Node, list[Node]],
    input_path: set[Node],
) -> _WeightGroups:
    """Group the parameters used by this graph by the frontier their gradients come through.

    A frontier element is an intermediate (on the input path) or an output node off the input
    path. Parameters that share one are computed in the same W call, so that the shared node
    runs once; parameters not reached from the outputs are left out (they get no gradient).
    """
    used: list[tuple[torch.Tensor, GradientEdge]] = []
    frontiers: list[tuple[set[Node], set[Node]]] = []
    root_nodes = {edge.node for edge in root_edges}
    for param in params:
        edge = get_gradient_edge(param)
        if edge.node not in parents:
            continue
        intermediates, own = _weight_frontier(edge.node, parents, input_path)
        used.append((param, edge))
        frontiers.append((intermediates, own & root_nodes))

    sets = _UnionFind(len(used))
    owner: dict[Node, int] = {}
    for i, (intermediates, roots) in enumerate(frontiers):
        for node in intermediates | roots:
            if node in owner:
                sets.union(i, owner[node])
            else:
                owner[node] = i

    by_rep: dict[int, _Group] = {}
    node_index: dict[Node, int] = {}
    intermediates_order: list[Node] = []
    for i, (param, edge) in enumerate(used):
        group = by_rep.setdefault(sets.find(i), _Group(params=[], param_edges=[], intermediates=[]))
        group.params.append(param)
        group.param_edges.append(edge)
        inter_nodes, roots = frontiers[i]
        for node in inter_nodes:
            if node not in node_index:
                node_index[node] = len(intermediates_order)
                intermediates_order.append(node)
                group.intermediates.append(node_index[node])
        for root_edge, grad in zip(root_edges, root_grads, strict=True):
            if root_edge.node in roots and not any(e is root_edge for e in group.root_edges):
                group.root_edges.append(root_edge)
                group.root_grads.append(grad)
    return _WeightGroups(groups=list(by_rep.values()), intermediates=intermediates_order)


# --------------------------------------------------------------------------- hooks and grads


def _capture_hook(captured: list[_NodeGrads | None], index: int) -> Callable[[_NodeGrads], None]:
    """A node prehook that records the gradients flowing into intermediate ``index`` during I."""

    def hook(grad_outputs: _NodeGrads) -> None:
        captured[index] = tuple(grad_outputs)

    return hook


def _clamp_hook(recorded: _NodeGrads | None) -> Callable[[_NodeGrads], _NodeGrads]:
    """A node prehook for W that replaces whatever arrives by the gradient recorded in I.

    In a W call an intermediate is a root (fed its recorded, already complete gradient) and
    may also be reached from another intermediate of the same call; without this the second
    contribution would be counted twice.
    """

    def hook(grad_outputs: _NodeGrads) -> _NodeGrads:
        return recorded if recorded is not None else tuple(None for _ in grad_outputs)

    return hook


def _remove_all(handles: Iterable[RemovableHandle]) -> None:
    """Remove hooks, so nodes do not keep closures (and the tensors in them) alive."""
    for handle in handles:
        handle.remove()


def _accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    """Add ``grad`` to ``param.grad`` like AccumulateGrad does: in place if present, else set.

    A new ``.grad`` is a copy in the parameter's layout: autograd may hand back one tensor as
    the gradient of several things (the input gradient returned by I, a caller's
    grad_output), and a later in-place accumulation must not write into those.
    """
    with torch.no_grad():
        if param.grad is None:
            if grad.layout == param.layout == torch.strided:
                param.grad = torch.empty_like(param).copy_(grad)
            else:
                param.grad = grad.clone()
        else:
            param.grad.add_(grad)


def _input_grads(
    outs: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    ins: Sequence[torch.Tensor],
    extra: Sequence[torch.Tensor],
    *,
    retain_graph: bool,
) -> tuple[tuple[torch.Tensor | None, ...], tuple[torch.Tensor | None, ...]]:
    """One autograd call for the inputs that require grad (and ``extra`` tensors).

    Returns (one entry per input, one per extra tensor), None where nothing flowed.
    """
    wanted = [inp for inp in ins if inp.requires_grad]
    if not outs or not (wanted or extra):
        return tuple(None for _ in ins), tuple(None for _ in extra)
    result = torch.autograd.grad(
        outs, [*wanted, *extra], grads, retain_graph=retain_graph, allow_unused=True
    )
    it = iter(result[: len(wanted)])
    input_grads = tuple(next(it) if inp.requires_grad else None for inp in ins)
    return input_grads, tuple(result[len(wanted) :])


# --------------------------------------------------------------------------- public API


def backward_input(
    outputs: torch.Tensor | Sequence[torch.Tensor],
    grad_outputs: torch.Tensor | Sequence[torch.Tensor | None] | None,
    inputs: torch.Tensor | Sequence[torch.Tensor],
    params: Sequence[torch.Tensor],
) -> tuple[tuple[torch.Tensor | None, ...], WeightGradState]:
    """The I action: input gradients only, plus the state :func:`backward_weight` needs.

    Runs autograd from ``outputs`` (fed ``grad_outputs``; None means ones for a one-element
    loss) towards ``inputs`` only, so no weight-gradient work is done, while recording the
    gradients that reach the nodes where the weight gradients branch off. Returns one gradient
    per input (None where an input does not require grad or does not influence the outputs)
    and a single-use :class:`WeightGradState`. ``params`` are the leaf tensors the forward used
    as weights (module parameters or plain leaves); their ``.grad`` is not touched until W.
    Input ``.grad`` is never set: the gradients are returned, for sending upstream. If no input
    needs a gradient there is no input path: I does nothing and W runs the whole backward.
    """
    outs, grads = _normalize_outputs(outputs, grad_outputs)
    ins = _check_inputs(inputs)
    ps = _check_params(params, ins)
    if not outs:
        return tuple(None for _ in ins), WeightGradState()

    root_edges = [get_gradient_edge(out) for out in outs]
    parents = _parents_map(edge.node for edge in root_edges)
    input_nodes = [get_gradient_edge(inp).node for inp in ins if inp.requires_grad]
    input_path = _ancestors((n for n in input_nodes if n in parents), parents)
    weight_groups = _group_weights(ps, root_edges, grads, parents, input_path)

    captured: list[_NodeGrads | None] = [None] * len(weight_groups.intermediates)
    handles = [
        node.register_prehook(_capture_hook(captured, i))
        for i, node in enumerate(weight_groups.intermediates)
    ]
    try:
        if input_path:
            input_grads, _ = _input_grads(outs, grads, ins, (), retain_graph=True)
        else:
            input_grads = tuple(None for _ in ins)
    finally:
        _remove_all(handles)

    python_nodes = any(isinstance(n, torch._C._FunctionBase) for n in weight_groups.intermediates)
    state = WeightGradState(
        _groups=weight_groups.groups,
        _intermediates=weight_groups.intermediates,
        _captured=captured,
        _param_versions=[(p, p._version) for g in weight_groups.groups for p in g.params],
        _graph_owners=root_edges if python_nodes else [],
    )
    return input_grads, state


def _check_usable(state: WeightGradState) -> None:
    """Refuse a consumed state, or one whose parameters changed in place since I."""
    if state.consumed:
        raise WeightGradStateError(
            "backward_weight was already called on this WeightGradState; each state from "
            "backward_input is used exactly once (call backward_input again for a new micro-batch)"
        )
    for param, version in state._param_versions:
        if param._version != version:
            raise WeightGradStateError(
                f"a parameter of shape {tuple(param.shape)} was modified in place after "
                f"backward_input (version {version} -> {param._version}); W must run before "
                "the weights change (e.g. before optimizer.step())"
            )


_STALE_GRAPH_MESSAGES = ("backward through the graph a second time", "modified by an inplace")


def _run_group(state: WeightGradState, group: _Group, *, retain_graph: bool) -> None:
    """One autograd call from the group's intermediates (and outputs) to its parameters."""
    roots: list[GradientEdge] = list(group.root_edges)
    root_grads: list[torch.Tensor] = list(group.root_grads)
    for index in group.intermediates:
        recorded = state._captured[index]
        for i, grad in enumerate(recorded or ()):
            if grad is not None:
                roots.append(GradientEdge(state._intermediates[index], i))
                root_grads.append(grad)
    if not roots:
        return
    handles: list[RemovableHandle] = []
    if group.needs_clamping:
        handles = [
            state._intermediates[i].register_prehook(_clamp_hook(state._captured[i]))
            for i in group.intermediates
        ]
    try:
        weight_grads = torch.autograd.grad(
            roots,
            group.param_edges,
            root_grads,
            retain_graph=retain_graph,
            allow_unused=True,
        )
    finally:
        _remove_all(handles)
    for param, grad in zip(group.params, weight_grads, strict=True):
        if grad is not None:
            _accumulate(param, grad)


def backward_weight(state: WeightGradState) -> None:
    """The W action: accumulate the weight gradients captured by I into each ``param.grad``.

    Restarts autograd from the recorded intermediate gradients towards the parameters only, so
    the input-gradient path is not recomputed. Adds to an existing ``.grad`` or sets it, the way
    ordinary autograd accumulates. The state is consumed and all its references (graph nodes,
    recorded gradients, hooks) are released, also when this raises. Raises
    :class:`WeightGradStateError` for a consumed state, for parameters modified in place since
    I, or when the graph was freed by another backward.
    """
    _check_usable(state)
    state._consumed = True
    # Groups with several intermediates may run the input path between them, through other
    # groups' intermediates: they go first and keep the graph. Every other node is run by
    # exactly one later call, which can then free its saved tensors as it goes.
    ordered = sorted(state._groups, key=lambda g: not g.needs_clamping)
    try:
        for group in ordered:
            _run_group(state, group, retain_graph=group.needs_clamping)
    except RuntimeError as error:
        if any(msg in str(error) for msg in _STALE_GRAPH_MESSAGES):
            raise WeightGradStateError(
                "backward_weight could not rerun the graph captured by backward_input (was it "
                f"freed by another backward, or a saved tensor modified in place?): {error}"
            ) from error
        raise
    finally:
        state._release()


def backward_full(
    outputs: torch.Tensor | Sequence[torch.Tensor],
    grad_outputs: torch.Tensor | Sequence[torch.Tensor | None] | None,
    inputs: torch.Tensor | Sequence[torch.Tensor],
    params: Sequence[torch.Tensor],
) -> tuple[torch.Tensor | None, ...]:
    """The B action: input and weight gradients in one ordinary autograd call.

    Same arguments and conventions as :func:`backward_input`; returns the input gradients and
    accumulates the parameter gradients into ``.grad`` (as I followed by W would). The graph
    is freed as by any backward without ``retain_graph``.
    """
    outs, grads = _normalize_outputs(outputs, grad_outputs)
    ins = _check_inputs(inputs)
    ps = _check_params(params, ins)
    input_grads, param_grads = _input_grads(outs, grads, ins, ps, retain_graph=False)
    for param, grad in zip(ps, param_grads, strict=True):
        if grad is not None:
            _accumulate(param, grad)
    return input_grads
