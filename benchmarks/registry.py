"""Find installed benchmark plug-ins by name and version, through the entry-point group
``sealbench.benchmarks`` (as keyring finds its backends): each distribution declares its
plug-ins in its metadata, ``<name> = "<module>:<object>"``, and the cores ask here instead of
importing one by name.

    [project.entry-points."sealbench.benchmarks"]
    brats-2023-gli = "sealbench.benchmarks.brats.plugin:PLUGIN"

The entry point's name is the plug-in's name; the object it loads is a
:class:`~sealbench.benchmarks.interface.Benchmark` (or a zero-argument callable returning one)
whose :attr:`~sealbench.benchmarks.interface.Benchmark.ref` must carry that name. Only the
entry points' names are read until a plug-in is asked for; a plug-in that fails to load is
reported by name, with the error, and does not hide the others.

A plug-in may take several versions of its pin, one per variant of its versioned contract
(BraTS: ``brats-2023-gli/1`` is 240x240x155, ``brats-2023-gli/1-64x64x48`` the same contract on
the small grid): it then has a ``pinned(version)`` method returning itself bound to that
variant, whose ``ref`` is exactly the pin (:class:`PinnedVariants`). The pin is what the owners'
key-release condition pins, so the variant the enclave enforces is attested.

Any pin's version may end in ``-exact`` (``wdbc/1-exact``, ``brats-2023-gli/1-64x64x48-exact``):
the plug-in of the version before it, bound to an exact (non-private) release through
:class:`~sealbench.benchmarks.interface.ExactReleases`, when the plug-in offers one. The word is
in the pin so that every party (owners' approvals, key-release conditions, the registry, the
leaderboard) sees it, and each dataset's owner must consent to it.

Any pin's version may end in ``-pool`` (``wdbc/1-pool``, ``brats-2023-gli/1-64x64x48-pool``,
``wdbc/1-exact-pool``; issue 41): the plug-in of the version before it, whose runs publish no
per-site release (:func:`~sealbench.benchmarks.interface.pooled_only_copy`): a benchmark that
pools in the TEE publishes its pooled release only, unless its authority chose per-site
releases too at ``benchmark create``. In the pin, so the key-release conditions bind it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Final, Protocol, runtime_checkable

from .interface import (
    EXACT_SUFFIX,
    POOLED_ONLY_SUFFIX,
    Benchmark,
    BenchmarkError,
    BenchmarkPin,
    ExactReleases,
    PluginNotFoundError,
    pooled_only_copy,
    publishes_site_release,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "PinnedVariants",
    "PluginLoadError",
    "PluginRegistry",
    "available",
    "load",
]

ENTRY_POINT_GROUP: Final = "sealbench.benchmarks"

_log = logging.getLogger("sealbench.benchmarks")


class PluginLoadError(BenchmarkError):
    """An installed plug-in's entry point could not be imported or is not a benchmark."""


@runtime_checkable
class PinnedVariants(Protocol):
    """A plug-in whose pin names a variant of its contract in the version."""

    def pinned(self, version: str) -> Benchmark:
        """The plug-in bound to the variant ``version`` names (its ``ref.version`` is
        ``version``); :class:`PluginNotFoundError` when it has no such version."""
        ...


def _is_benchmark(obj: object) -> bool:
    return all(hasattr(obj, attr) for attr in (
        "ref", "presentation", "summarise", "parse_summary", "score", "open_dataset",
        "load_model", "check_model"))


class PluginRegistry:
    """The plug-ins of a set of entry points (by default the installed ones). Loaded plug-ins
    are kept, so each is imported once."""

    def __init__(self, points: Iterable[EntryPoint] | None = None) -> None:
        found = entry_points(group=ENTRY_POINT_GROUP) if points is None else points
        self._points: dict[str, EntryPoint] = {}
        for point in found:
            # Two distributions declaring one name would make the choice arbitrary: refuse it
            # when that name is asked for, rather than picking one silently.
            if point.name in self._points and self._points[point.name].value != point.value:
                self._points[point.name] = EntryPoint(point.name, "", ENTRY_POINT_GROUP)
            else:
                self._points[point.name] = point
        self._loaded: dict[str, Benchmark] = {}
        self._variants: dict[str, Benchmark] = {}

    def names(self) -> tuple[str, ...]:
        """Names of the installed plug-ins, sorted."""
        return tuple(sorted(self._points))

    def get(self, name: str) -> Benchmark:
        """The plug-in called ``name``: :class:`PluginNotFoundError` naming the installed ones, or
        :class:`PluginLoadError`."""
        if name in self._loaded:
            return self._loaded[name]
        point = self._points.get(name)
        if point is None:
            installed = ", ".join(self.names()) or "none"
            raise PluginNotFoundError(
                f"no benchmark plug-in named {name!r} is installed (installed: {installed})")
        if not point.value:
            raise PluginLoadError(f"benchmark plug-in {name!r} is declared by two distributions")
        try:
            obj: object = point.load()
            if isinstance(obj, type) or (callable(obj) and not _is_benchmark(obj)):
                factory: Callable[[], object] = obj
                obj = factory()
        except Exception as exc:  # a plug-in's import error, reported by name
            raise PluginLoadError(
                f"benchmark plug-in {name!r} ({point.value}) failed to load: "
                f"{type(exc).__name__}: {exc}") from exc
        if not _is_benchmark(obj):
            raise PluginLoadError(
                f"benchmark plug-in {name!r} ({point.value}) is not a Benchmark")
        plugin: Benchmark = obj  # type: ignore[assignment]
        if plugin.ref.name != name:
            raise PluginLoadError(
                f"entry point {name!r} loads a plug-in that calls itself {plugin.ref.name!r}")
        self._loaded[name] = plugin
        return plugin

    def load(self, ref: BenchmarkPin) -> Benchmark:
        """The plug-in pinned by ``ref``: :class:`PluginNotFoundError` when none of that name is
        installed or the installed one has another version. The pin is parsed where it enters
        (:meth:`BenchmarkPin.parse`), never here."""
        if not isinstance(ref, BenchmarkPin):
            raise TypeError(f"expected a BenchmarkPin, not {type(ref).__name__} (parse the text "
                            "where it enters: BenchmarkPin.parse)")
        if ref.version.endswith(POOLED_ONLY_SUFFIX) and len(ref.version) > len(
                POOLED_ONLY_SUFFIX):
            return self._pooled_only(ref)
        if ref.version.endswith(EXACT_SUFFIX) and len(ref.version) > len(EXACT_SUFFIX):
            return self._exact(ref)
        plugin = self.get(ref.name)
        if plugin.ref.version == ref.version:
            return plugin
        if not isinstance(plugin, PinnedVariants):
            raise PluginNotFoundError(
                f"benchmark plug-in {ref.name!r} is installed at version "
                f"{plugin.ref.version!r}, not {ref.version!r} (pinned {ref})")
        key = str(ref)
        if key not in self._variants:
            variant = plugin.pinned(ref.version)
            if variant.ref != ref:
                raise PluginLoadError(
                    f"benchmark plug-in {ref.name!r} returned {variant.ref} for the pin {ref}")
            self._variants[key] = variant
        return self._variants[key]

    def _exact(self, ref: BenchmarkPin) -> Benchmark:
        key = str(ref)
        if key not in self._variants:
            base = self.load(BenchmarkPin(ref.name, ref.version[: -len(EXACT_SUFFIX)]))
            if not isinstance(base, ExactReleases) or base.release_spec.exact \
                    or not publishes_site_release(base):  # '-exact-pool', never '-pool-exact'
                raise PluginNotFoundError(
                    f"benchmark plug-in {ref.name!r} offers no exact release (pinned {ref})")
            variant = base.exact_release()
            if variant.ref != ref or not variant.release_spec.exact:
                raise PluginLoadError(
                    f"benchmark plug-in {ref.name!r} returned {variant.ref} (exact: "
                    f"{variant.release_spec.exact}) for the pin {ref}")
            self._variants[key] = variant
        return self._variants[key]

    def _pooled_only(self, ref: BenchmarkPin) -> Benchmark:
        key = str(ref)
        if key not in self._variants:
            base = self.load(BenchmarkPin(ref.name, ref.version[: -len(POOLED_ONLY_SUFFIX)]))
            if not publishes_site_release(base):
                raise PluginNotFoundError(f"{ref} names no plug-in: pooled only once")
            variant = pooled_only_copy(base)
            if variant.ref != ref:
                raise PluginLoadError(
                    f"benchmark plug-in {ref.name!r} gave {variant.ref} for the pin {ref}")
            self._variants[key] = variant
        return self._variants[key]

    def available(self) -> tuple[BenchmarkPin, ...]:
        """The refs of every installed plug-in that loads (one that fails is logged)."""
        refs = []
        for name in self.names():
            try:
                refs.append(self.get(name).ref)
            except BenchmarkError as exc:
                _log.warning("%s", exc)
        return tuple(refs)


_default: PluginRegistry | None = None


def _registry() -> PluginRegistry:
    global _default  # a cache of the installed entry points, safe to lose
    if _default is None:
        _default = PluginRegistry()
    return _default


def load(ref: BenchmarkPin) -> Benchmark:
    """The installed plug-in pinned by ``ref`` (see :meth:`PluginRegistry.load`)."""
    return _registry().load(ref)


def available() -> tuple[BenchmarkPin, ...]:
    """The refs of the installed plug-ins."""
    return _registry().available()
