"""The demo's second benchmark: any installed plug-in's shipped definition played end to end with
the same steps as BraTS (the library calls of the same commands, made by
:class:`~sealbench.client.demo.participants.Participants`; ``sealbench demo`` plays ``wdbc``,
breast-cancer diagnosis on real cases, next to BraTS).

Same roles as the BraTS part: the authority publishes the definition and the admin approves it;
the two labs register, seal and associate the plug-in's shipped models (reference first); each
hospital writes the plug-in's demo data (:meth:`write_demo_dataset` with the hospital's index
as seed: for WDBC, two disjoint sites with different case mixes), prepares, registers, seals and
associates it; the authority approves, every owner syncs its policy, the hospitals run every
model on the TEE, open and submit the results; the benchmark pools in the TEE, so the
authority pools each model's results inside it (one private release over every hospital's cases)
and reads the leaderboard, ranked by the plug-in's headline metric.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from sealbench.client.demo.participants import Participants

__all__ = ["PluginDemoOutcome", "play_plugin_benchmark"]

T = TypeVar("T")


class Narrator(Protocol):
    """What the demo's narrator offers (:class:`sealbench.client.demo.flow._Narrator`)."""

    def section(self, title: str) -> None: ...

    def step(self, argv: str, action: Callable[[], T]) -> T: ...

    def note(self, text: str) -> None: ...


@dataclass(frozen=True)
class PluginDemoOutcome:
    benchmark_id: int
    #: The plug-in pin, and every run the hospitals made (``RunRecord``), in order.
    plugin: str
    runs: tuple[Any, ...]
    #: Each hospital's dataset in this benchmark.
    datasets: Mapping[str, int]


def play_plugin_benchmark(
    say: Narrator,
    who: Participants,
    workdir: Path,
    definition_name: str,
    *,
    hospitals: Sequence[str],
    labs: Sequence[str],
    cases: Sequence[int],
    tee: str,
    number: int,
) -> PluginDemoOutcome:
    """Publish ``definition_name`` pooling in the TEE and evaluate every lab's shipped model on
    every hospital's demo data (``cases[i]`` cases at hospital ``i``), then pool each model
    inside the TEE; ``number`` numbers the demo's section."""
    from sealbench.client import plugins
    from sealbench.client.registry import definitions
    from sealbench.client.runs.options import RunOptions

    definition = definitions.load_benchmark_definition(definition_name)
    extra = definition.model_extra or {}
    shipped = [extra["reference_model"], *extra.get("baseline_models", ())][: len(labs)]
    say.section(f"{number}. a second benchmark, {definition.name} ({definition.plugin}): "
                "published, joined and evaluated with the same commands")
    bench = say.step(
        f"--profile authority benchmark create --definition {definition_name} --tee {tee} "
        "--pool-in-tee",
        partial(who.benchmark_create, "authority", definition_name, tee=tee, pool_in_tee=True),
    )
    b = bench.id
    say.step(f"--profile admin benchmark approve {b}", partial(who.benchmark_approve, "admin", b))
    models: dict[str, int] = {}
    for lab, ref in zip(labs, shipped, strict=False):
        onnx = workdir / definition_name / lab / f"{ref['name']}.onnx"
        onnx.parent.mkdir(parents=True, exist_ok=True)
        onnx.write_bytes(definitions.shipped_model_bytes(definition, ref["name"]))
        models[lab] = m = say.step(
            f"--profile {lab} model register {onnx} --name {ref['name']} --version 1.0 "
            f"--benchmark {b}",
            partial(who.model_register, lab, onnx, name=ref["name"], version="1.0",
                    benchmark=b),
        ).id
        say.step(f"--profile {lab} model seal {onnx} --model {m}",
                 partial(who.seal, lab, "model", m, onnx))
        say.step(f"--profile {lab} model associate --model {m} --benchmark {b}",
                 partial(who.associate, lab, "model", m, b))
    plugin = plugins.plugin_for(who.client("authority").get_benchmark(b))
    datasets: dict[str, int] = {}
    for index, hospital in enumerate(hospitals):
        base = workdir / definition_name / hospital
        raw, prepared = base / "raw", base / "prepared"
        ids = plugin.write_demo_dataset(raw, cases[index], seed=index)
        say.note(f"{hospital} holds {len(ids)} cases of {plugin.ref} in {raw} (demo data of "
                 f"site {index})")
        say.step(f"--profile {hospital} dataset prepare {raw} {prepared} --benchmark {b}",
                 partial(who.dataset_prepare, hospital, raw, prepared, benchmark=b))
        name = f"{hospital}-{definition_name}"
        datasets[hospital] = d = say.step(
            f"--profile {hospital} dataset register {prepared} --name {name} --benchmark {b}",
            partial(who.dataset_register, hospital, prepared, name=name, benchmark=b),
        ).id
        say.step(f"--profile {hospital} dataset seal {prepared} --dataset {d}",
                 partial(who.seal, hospital, "dataset", d, prepared))
        say.step(f"--profile {hospital} dataset associate --dataset {d} --benchmark {b}",
                 partial(who.associate, hospital, "dataset", d, b))
    for d in datasets.values():
        say.step(f"--profile authority association approve --benchmark {b} --dataset {d}",
                 partial(who.association_approve, "authority", b, dataset=d))
    for m in models.values():
        say.step(f"--profile authority association approve --benchmark {b} --model {m}",
                 partial(who.association_approve, "authority", b, model=m))
    for hospital, d in datasets.items():
        say.step(f"--profile {hospital} policy sync --dataset {d}",
                 partial(who.policy_sync, hospital, "dataset", d))
    for lab, m in models.items():
        say.step(f"--profile {lab} policy sync --model {m}",
                 partial(who.policy_sync, lab, "model", m))
    runs: list[Any] = []
    for hospital, d in datasets.items():
        records = say.step(
            f"--profile {hospital} run --benchmark {b} --dataset {d} --all-models --parallel 2 "
            f"--tee {tee}",
            partial(who.run, hospital, RunOptions(benchmark=b, dataset=d, all_approved=True,
                                                  parallel=2, tee=tee)),
        )
        runs.extend(records)
        for record in records:
            say.step(f"--profile {hospital} result open {record.run_id}",
                     partial(who.result_open, hospital, record.run_id))
            say.step(f"--profile {hospital} result submit {record.run_id}",
                     partial(who.result_submit, hospital, record.run_id))
    say.step(f"--profile authority benchmark pool {b} --tee {tee}",
             partial(who.pool, "authority", b, tee))
    say.step(f"--profile authority benchmark leaderboard {b}",
             partial(who.leaderboard, "authority", b))
    return PluginDemoOutcome(b, str(plugin.ref), tuple(runs), dict(datasets))
