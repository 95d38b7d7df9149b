"""The schedule IR shared by the simulator and the executor.

A :class:`Schedule` is, for each device, the ordered tuple of actions it runs in one training
step, plus the stage-to-device placement, the micro-batch count and the weight-update
semantics. Dependencies between actions are implied, never stored (see
:meth:`Schedule.dependencies`). A schedule is validated when it is built, so an instance that
exists is complete, correctly placed and free of deadlock.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar, cast

from pipesim.errors import ScheduleError
from pipesim.schedules.action import Action, Kind, UpdateRule
from pipesim.schedules.encoded import KINDS, ActionArrays, EncodedSchedule
from pipesim.schedules.encoded import I as I_CODE
from pipesim.schedules.validator import Checked, validate

__all__ = ["Schedule", "UpdateRule"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class _Tables:
    """Each action's dependencies and consumers (see :meth:`Schedule.dependencies`)."""

    dependencies: dict[Action, tuple[Action, ...]]
    consumers: dict[Action, tuple[Action, ...]]


class Schedule:
    """One training step of a pipeline schedule.

    Attributes:
        name: what produced it (a generator name, or a file).
        microbatches: M, the micro-batches of one step (one optimizer update).
        placement: ``placement[stage]`` is the device that holds ``stage``; S = len(placement).
        device_actions: ``device_actions[device]`` is the ordered tuple that device runs
            (made from :attr:`action_arrays` on first read).
        action_arrays: the same lists as integer arrays, the form the schedule keeps
            (:class:`~pipesim.schedules.encoded.ActionArrays`).
        update_rule: the weight-update semantics.
        rematerialize: stash only each stage's input per micro-batch and re-run the stage's
            forward inside its backward (GPipe's re-materialization).
        generator: the registered generator that built this very schedule, set by
            :func:`~pipesim.schedules.registry.build` only; None for a schedule made by hand or
            loaded from a file, whatever its name (see :attr:`generator`).
        copies: C, the copies of the model the stages hold (1 but for DualPipe's two). The
            model is cut into S_model = S / C stages (:attr:`model_stages`); the IR numbers
            stages copy-major, so copy c's stages are c·S_model .. (c+1)·S_model - 1, in the
            order its micro-batches flow through them.
        routes: ``routes[m]`` is the copy micro-batch m runs through (length M). Its actions
            name the stages of that copy only; dependencies stop at a copy's first and last
            stage. By default every micro-batch runs through copy 0 when C = 1, and otherwise
            the micro-batches are cut into C contiguous equal blocks, block c through copy c
            (DualPipe's split of the mini-batch).

    ``device_actions`` may be given as lists of :class:`Action` or as an
    :class:`~pipesim.schedules.encoded.ActionArrays` (what the generators build: a large
    schedule is then never a tuple of objects unless someone asks for one). Instances are
    immutable; two are equal when every field and every list is.
    """

    name: str
    microbatches: int
    placement: tuple[int, ...]
    update_rule: UpdateRule
    rematerialize: bool
    copies: int
    routes: tuple[int, ...]
    _rows: tuple[tuple[Action, ...], ...] | None
    _arrays: ActionArrays | None
    _checked: Checked | None
    _flat: tuple[Action, ...]
    _order: tuple[Action, ...]
    _lookup: _Tables | None
    _generator: str | None
    _derived: dict[Hashable, object]

    def __init__(
        self,
        name: str,
        microbatches: int,
        placement: Sequence[int],
        device_actions: Sequence[Sequence[Action]] | ActionArrays,
        update_rule: UpdateRule = UpdateRule.FLUSH,
        rematerialize: bool = False,
        copies: int = 1,
        routes: Sequence[int] | None = None,
    ) -> None:
        # Accept any sequences; store tuples so the schedule is immutable.
        fields: dict[str, object] = {
            "name": name,
            "microbatches": microbatches,
            "placement": _as_tuple(placement, "placement"),
            "update_rule": update_rule,
            "rematerialize": rematerialize,
            "copies": copies,
            "routes": default_routes(microbatches, copies)
            if routes is None
            else _as_tuple(routes, "routes"),
            "_rows": None,
            "_arrays": None,
            "_checked": None,
            "_flat": (),
            "_order": (),
            "_lookup": None,
            "_generator": None,
            "_derived": {},
        }
        if isinstance(device_actions, ActionArrays):
            fields["_arrays"] = device_actions
        else:
            rows = _as_tuple(device_actions, "device_actions")
            fields["_rows"] = tuple(_as_tuple(row, "device_actions row") for row in rows)
        self.__dict__.update(fields)
        checked = validate(self)
        self.__dict__["_checked"] = checked
        if self._arrays is None:  # the encoding holds the lists' arrays: keep one copy
            encoded = checked.encoded
            self.__dict__["_arrays"] = ActionArrays(
                encoded.row_starts, encoded.stage, encoded.kind, encoded.microbatch
            )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Schedule is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Schedule is immutable: cannot delete {name!r}")

    def replace(self, **changes: object) -> Schedule:
        """A new schedule with ``changes`` to its fields (``name``, ``microbatches``,
        ``placement``, ``device_actions``, ``update_rule``, ``rematerialize``, ``copies``,
        ``routes``), validated. A change of ``microbatches`` or ``copies`` without ``routes``
        takes the default routes."""
        fields: dict[str, object] = {
            "name": self.name,
            "microbatches": self.microbatches,
            "placement": self.placement,
            "device_actions": self.action_arrays,
            "update_rule": self.update_rule,
            "rematerialize": self.rematerialize,
            "copies": self.copies,
            "routes": self.routes,
        }
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"Schedule has no field(s) {', '.join(sorted(unknown))}")
        if ("microbatches" in changes or "copies" in changes) and "routes" not in changes:
            fields["routes"] = None
        fields.update(changes)
        return Schedule(**fields)  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (
            self.name == other.name
            and self.microbatches == other.microbatches
            and self.placement == other.placement
            and self.update_rule is other.update_rule
            and self.rematerialize == other.rematerialize
            and self.copies == other.copies
            and self.routes == other.routes
            and self.action_arrays.same_as(other.action_arrays)
        )

    def __hash__(self) -> int:
        return hash((self.name, self.microbatches, self.placement, self.action_arrays.actions))

    def __repr__(self) -> str:
        copies = f", copies={self.copies}" if self.copies > 1 else ""
        return (
            f"Schedule(name={self.name!r}, devices={self.devices}, "
            f"microbatches={self.microbatches}, chunks={self.chunks}, "
            f"actions={self.action_arrays.actions}, update_rule={self.update_rule.value}, "
            f"rematerialize={self.rematerialize}{copies})"
        )

    def __reduce__(self) -> tuple[object, ...]:
        # Pickle the arrays and fields only (a worker process rebuilds and revalidates; the
        # caches stay behind), and keep the generator's name.
        return (
            _restore,
            (
                self.name,
                self.microbatches,
                self.placement,
                self.action_arrays,
                self.update_rule,
                self.rematerialize,
                self._generator,
                self.copies,
                self.routes if self.copies > 1 else None,
            ),
        )

    @property
    def device_actions(self) -> tuple[tuple[Action, ...], ...]:
        """Per device, the ordered actions it runs (made from the arrays on first read)."""
        rows = self.__dict__["_rows"]
        if rows is None:
            rows = self.__dict__["_rows"] = self.action_arrays.rows()
        return rows  # type: ignore[no-any-return]

    @property
    def action_arrays(self) -> ActionArrays:
        """The per-device lists as integer arrays (what the validator and engines read)."""
        return self.__dict__["_arrays"]  # type: ignore[no-any-return]

    @property
    def encoded(self) -> EncodedSchedule:
        """The schedule as integer arrays, as the validator encoded it (for engines)."""
        checked: Checked = self.__dict__["_checked"]
        return checked.encoded

    def _flat_actions(self) -> tuple[Action, ...]:
        """Every action, device by device (the encoding's flat order); built once."""
        if not self._flat:
            self.__dict__["_flat"] = self.actions()
        return self._flat

    def derived(self, key: Hashable, make: Callable[[], _T]) -> _T:
        """A value computed from this schedule alone, made on first request and kept: engines
        keep their cost-independent layouts here, so a schedule simulated under many costs
        (a planner's, a sweep's) is laid out once."""
        try:
            return cast(_T, self._derived[key])
        except KeyError:
            value = self._derived[key] = make()
            return value

    @property
    def generator(self) -> str | None:
        """The registered generator that built this schedule, or None (made by hand, loaded)."""
        return self._generator

    def _set_generator(self, name: str) -> None:
        """Record the registered generator that built this schedule (the registry's call)."""
        self.__dict__["_generator"] = name

    # -- shape -----------------------------------------------------------------------------

    @property
    def devices(self) -> int:
        """K, the pipeline devices."""
        return self.action_arrays.devices

    @property
    def stages(self) -> int:
        """S = C·K·v, the stages of the IR: the contiguous slices of the model (K·v of them),
        once per copy; stage 0 takes the input."""
        return len(self.placement)

    @property
    def model_stages(self) -> int:
        """S_model = S / C = K·v, the stages the model is cut into (each copy holds them all)."""
        return self.stages // self.copies

    @property
    def chunks(self) -> int:
        """v, the model chunks each device holds of each copy (the stages it holds, over C)."""
        return self.stages // (self.devices * self.copies)

    def model_stage(self, stage: int) -> int:
        """The slice of the model IR stage ``stage`` holds (``stage`` mod S_model)."""
        return stage % self.model_stages

    def copy_of_stage(self, stage: int) -> int:
        """The copy of the model IR stage ``stage`` belongs to."""
        return stage // self.model_stages

    def first_of_copy(self, stage: int) -> bool:
        """True when ``stage`` takes its copy's input (the model's first slice)."""
        return stage % self.model_stages == 0

    def last_of_copy(self, stage: int) -> bool:
        """True when ``stage`` computes its copy's loss (the model's last slice)."""
        return stage % self.model_stages == self.model_stages - 1

    def stages_of_copy(self, copy: int) -> range:
        """The IR stages of ``copy``, in the order its micro-batches flow through them."""
        return range(copy * self.model_stages, (copy + 1) * self.model_stages)

    def on_stages(self, values: Sequence[_T]) -> tuple[_T, ...]:
        """Per-stage ``values`` for every IR stage: given per IR stage (S of them) they are
        kept; given per model stage (S_model of them, one copy's), each copy's stage takes its
        model stage's value. Anything else is refused."""
        if len(values) == self.stages:
            return tuple(values)
        if len(values) == self.model_stages:
            return tuple(values[self.model_stage(s)] for s in range(self.stages))
        per_model = f" or {self.model_stages} (one per model stage)" if self.copies > 1 else ""
        raise ScheduleError(
            f"schedule {self.name!r} needs {self.stages} per-stage values{per_model}, got "
            f"{len(values)}"
        )

    def device_of(self, stage: int) -> int:
        """The device that holds ``stage``."""
        return self.placement[stage]

    def stages_on(self, device: int) -> tuple[int, ...]:
        """The stages ``device`` holds, in increasing order."""
        return tuple(s for s, d in enumerate(self.placement) if d == device)

    # -- dependencies ----------------------------------------------------------------------

    def backward_kind(self, stage: int, microbatch: int) -> Kind:
        """``Kind.B`` if (stage, micro-batch) runs one full backward, ``Kind.I`` if split I+W."""
        table = self.encoded.backward_kind
        if not (0 <= stage < table.shape[0] and 0 <= microbatch < table.shape[1]):
            raise KeyError((stage, microbatch))
        return KINDS[int(table[stage, microbatch])]

    def _tables(self) -> _Tables:
        """Per action, its dependencies and consumers as tuples; built on first use (the
        engines read the integer encoding instead, so a sweep never pays for these)."""
        if self._lookup is None:
            flat = self._flat_actions()
            dependencies = self.encoded.dependencies
            needs: dict[Action, tuple[Action, ...]] = {}
            feeds: dict[Action, list[Action]] = {a: [] for a in flat}
            for action, (first, second) in zip(flat, dependencies.tolist(), strict=True):
                if first < 0:
                    needs[action] = ()
                elif second < 0:
                    needs[action] = (flat[first],)
                else:
                    needs[action] = (flat[first], flat[second])
            for action in flat:  # device by device, each list in order
                for dependency in needs[action]:
                    feeds[dependency].append(action)
            consumers = {a: tuple(c) for a, c in feeds.items()}
            # One reference swap of a complete pair: threads that race here both build the
            # same tables, and none ever reads a half-built one.
            self.__dict__["_lookup"] = _Tables(needs, consumers)
        tables: _Tables = self.__dict__["_lookup"]
        return tables

    def dependency_map(self) -> Mapping[Action, tuple[Action, ...]]:
        """Every action's :meth:`dependencies` at once (one lookup table, built once)."""
        return MappingProxyType(self._tables().dependencies)

    def consumer_map(self) -> Mapping[Action, tuple[Action, ...]]:
        """Every action's :meth:`consumers` at once (one lookup table, built once)."""
        return MappingProxyType(self._tables().consumers)

    def dependencies(self, action: Action) -> tuple[Action, ...]:
        """The actions whose results ``action`` consumes.

        F(s,m) needs F(s-1,m). B(s,m) and I(s,m) need F(s,m) and the backward of (s+1,m) that
        produces the gradient (B or I, whichever that stage runs); the last stage needs only its
        own F, the loss. W(s,m) needs I(s,m). A dependency between stages on different devices
        is a transfer: activations forward, gradients backward.
        """
        try:
            return self._tables().dependencies[action]
        except (KeyError, TypeError):
            raise ScheduleError(f"{action} is not an action of schedule {self.name!r}") from None

    def consumers(self, action: Action) -> tuple[Action, ...]:
        """The actions that consume ``action``'s result: the inverse of :meth:`dependencies`.

        The order is fixed (device by device, each device's list in order), so a sender and a
        receiver that both walk it agree on the order of their messages. Built on first use.
        """
        try:
            return self._tables().consumers[action]
        except (KeyError, TypeError):
            raise ScheduleError(f"{action} is not an action of schedule {self.name!r}") from None

    def execution_order(self) -> tuple[Action, ...]:
        """Every action once, in an order that respects each device's list and every dependency.

        This is the order the validator's dry run found; executors that run all devices in one
        process follow it.
        """
        if not self._order:
            flat = self._flat_actions()
            self.__dict__["_order"] = tuple(flat[i] for i in self.encoded.order.tolist())
        return self._order

    def actions(self) -> tuple[Action, ...]:
        """Every action of the step, device by device."""
        return tuple(itertools.chain.from_iterable(self.device_actions))

    def uses_split_backward(self) -> bool:
        """True when some (stage, micro-batch) splits its backward into I and W."""
        return bool((self.encoded.backward_kind == I_CODE).any())

    def weight_staleness_steps(self, device: int) -> int:
        """How many optimizer steps old the weights are that ``device`` computes with.

        0 for flush schedules, 1 for 2BW (W(t-1)), and K-1-d for PipeDream's weight stashing,
        whose gradient is grad f(w_1(t-K+1), ..., w_K(t)) (Narayanan et al., SOSP 2019).
        """
        if self.update_rule is UpdateRule.FLUSH:
            return 0
        if self.update_rule is UpdateRule.TWO_BW:
            return 1
        return self.devices - 1 - device

    def __str__(self) -> str:
        from pipesim.schedules.layout import render_schedule

        return render_schedule(self)


def _as_tuple(value: Sequence[object] | object, what: str) -> tuple:  # type: ignore[type-arg]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ScheduleError(f"{what} must be a sequence, got {value!r}")
    return tuple(value)


def default_routes(microbatches: object, copies: object) -> tuple[int, ...]:
    """Every micro-batch through copy 0 for one copy; else the micro-batches in C contiguous
    equal blocks (as equal as M allows), block c through copy c. Values the validator will
    refuse give no routes."""
    if type(microbatches) is not int or microbatches < 1:
        return ()
    if type(copies) is not int or copies < 1:
        return ()
    return tuple(m * copies // microbatches for m in range(microbatches))


def _restore(
    name: str,
    microbatches: int,
    placement: tuple[int, ...],
    arrays: ActionArrays,
    update_rule: UpdateRule,
    rematerialize: bool,
    generator: str | None,
    copies: int = 1,
    routes: tuple[int, ...] | None = None,
) -> Schedule:
    """A pickled schedule, rebuilt (and so revalidated) from its arrays."""
    schedule = Schedule(
        name, microbatches, placement, arrays, update_rule, rematerialize, copies, routes
    )
    if generator is not None:
        schedule._set_generator(generator)
    return schedule
