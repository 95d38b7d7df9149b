"""The published-runs suite (validation/reproduce/published.py): the data says where each number
comes from, the rules fill what a source leaves out, the conversions agree with the sources' own
pairs of figures, and the headline counts only out-of-sample runs read in their source."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from importlib import resources

import pytest

from validation.reproduce import published, published_data
from validation.reproduce.framework import Sample
from validation.reproduce.published import Prediction, headline
from validation.reproduce.published_data import (
    FILL_RULES,
    flops_per_step,
    published_runs,
    published_seconds,
)


@pytest.fixture(scope="module")
def found() -> list[Prediction]:
    return published.predictions()


def _run(run_id: str) -> published_data.PublishedRun:
    return next(r for r in published_runs()[1] if r.id == run_id)


def test_the_suite_has_the_issues_breadth(found: list[Prediction]) -> None:
    """Issue 37: at least 12 measured runs from at least 6 sources and 4 frameworks or eras;
    every run quotes its source, every source names a known recipe."""
    sources, runs = published_runs()
    assert all(r.quote and r.where for r in runs)
    predicted_out = [p for p in found if p.predicted_s is not None and p.run.source.counted]
    assert len(predicted_out) >= 12
    in_sample_tables = 2  # 2104.04473 Table 1 and 2205.05198 Table 5, from the megatron suite
    assert len(sources) + in_sample_tables >= 6
    frameworks = {s.framework for s in sources} | {"Megatron-LM 2021", "Megatron-LM 2022"}
    assert len(frameworks) >= 4
    assert {s.recipe_object().name.split("+")[0] for s in sources} <= {
        "deepspeed-pipe",
        "nemo-2024",
        "megatron-core-2024",
        "torchtitan",
    }


def test_the_file_states_only_what_the_sources_state() -> None:
    """The rules fill exactly the fields the data file leaves out (no filled field was also
    stated, none left out was silently defaulted)."""
    text = resources.files("validation.reproduce").joinpath(published_data.DATA_FILE).read_text()
    entries = {entry["id"]: entry for entry in tomllib.loads(text)["run"]}
    statable = [r for r in published_runs()[1] if not r.unstatable]
    for run in statable:
        fill = published_data.filled(run)
        stated = entries[run.id]
        for field_name in ("microbatch_size", "recompute", "sequence_parallel", "dtype"):
            assert (field_name in fill.filled) == (field_name not in stated), (run.id, field_name)
        assert ("chunks" in fill.filled) == ("chunks" not in stated)
        assert ("network" in fill.filled) == ("inter_node_bytes_per_s_per_gpu" not in stated)
        assert set(fill.filled) <= set(FILL_RULES)


def test_a_filled_recomputation_is_the_least_that_fits(found: list[Prediction]) -> None:
    """The rule for an unstated recomputation: the first of the framework's options with
    which every stage fits; the option before it (where there is one) does not fit."""
    checked = 0
    for p in found:
        if p.filled is None or "recompute" not in p.filled.filled:
            continue
        options = published_data.recompute_options(p.run.source.recipe)
        index = options.index(p.filled.recompute)
        assert not p.filled.simulate().oom
        if index > 0:
            assert p.filled.simulate(recompute=options[index - 1]).oom, p.run.id
            checked += 1
    assert checked >= 1  # MT-NLG's 530B needs full recomputation: none does not fit


def test_the_flop_counts_give_back_the_sources_own_pairs() -> None:
    """Where a source publishes both a step time and a rate, the suite's conversion of the
    rate gives the time: BLOOM's 149.02 TFLOPs (recomputation counted, its README's '4*2
    co-efficient') and 105.22 s; MT-NLG's 126 TFLOP/s and 60.1 s; the DGX Cloud GPT-3 175B
    README's 2.20E+15 model FLOPs per sequence (Megatron-Core's count)."""
    bloom = _run("bloom-176b-production")
    seconds = flops_per_step(bloom, "megatron-recompute") / (149.02e12 * bloom.gpus)
    assert seconds == pytest.approx(105.22, rel=0.01)
    mt_nlg = _run("mt-nlg-530b-280-nodes")
    seconds = flops_per_step(mt_nlg, "megatron-recompute") / (126e12 * mt_nlg.gpus)
    assert seconds == pytest.approx(60.1, rel=0.01)
    gpt3 = _run("gpt3-175b-nemo-128")
    per_sequence = flops_per_step(gpt3, "megatron-core") / gpt3.global_batch
    assert per_sequence == pytest.approx(2.20e15, rel=0.005)
    mcore = _run("mcore-70b-768")
    assert published_seconds(mcore) == pytest.approx(
        flops_per_step(mcore, "megatron-core") / (419.7e12 * 768)
    )
    with pytest.raises(ValueError, match="unknown FLOP formula"):
        flops_per_step(mcore, "palm")


def test_context_parallel_and_fsdp_runs_are_predicted_and_hsdp_is_listed_without_one(
    found: list[Prediction],
) -> None:
    """The runs listed before context parallelism and FSDP existed are predicted now, under
    CP = 2 and ZeRO-3; a run pipesim cannot state (hybrid sharding) is listed without a
    prediction and says why."""
    by_id = {p.run.id: p for p in found}
    for run_id in (
        "llama3.1-70b-nemo-cp2-64",
        "llama3-8b-torchtitan-fsdp-64",
        "llama3-70b-torchtitan-fsdp-64",
    ):
        assert by_id[run_id].predicted_s is not None
    cp = by_id["llama3.1-70b-nemo-cp2-64"]
    assert cp.filled is not None and "CP=2" in cp.filled.label()
    fsdp = by_id["llama3-8b-torchtitan-fsdp-64"]
    assert fsdp.filled is not None and fsdp.filled.zero == 3
    hybrid = dataclasses.replace(fsdp.run, sharding="hsdp")
    unstated = published.predict(hybrid)
    assert unstated.predicted_s is None and unstated.error is None
    assert hybrid.unstatable == "hsdp sharding is not modelled"


def test_mixture_of_experts_runs_are_stated_with_expert_parallelism(
    found: list[Prediction],
) -> None:
    """The Grok 1 rows build their MoE blocks from the data file's keys and run under
    Parallelism(expert=EP); a catalogue MoE model is named with the run's own shape."""
    by_id = {p.run.id: p for p in found}
    grok = by_id["grok1-314b-nemo-512"]
    assert grok.filled is not None and grok.predicted_s is not None
    moe = grok.run.architecture.moe
    assert moe is not None and (moe.experts, moe.top_k, moe.expert_ffn) == (8, 2, 32768)
    assert moe.capacity_factor == 1.0
    assert grok.run.expert_parallel == 8 and "EP=8" in grok.filled.label()
    assert published_data._architecture({"family": "catalogue", "name": "mixtral-8x7b"}).moe
    stated = published_data._architecture(
        {"family": "catalogue", "name": "mixtral-8x22b", "seq": 65536}
    )
    assert stated.seq == 65536 and stated.layers == 56
    with pytest.raises(ValueError, match="no catalogue MoE model"):
        published_data._architecture({"family": "catalogue", "name": "grok-1"})


def test_the_headline_counts_out_of_sample_primary_sources_only(found: list[Prediction]) -> None:
    """In-sample sources (MT-NLG: seen before a recipe choice was added) and secondary
    transcriptions never count; moving an in-sample run's error changes nothing."""
    top = headline(found)
    counted = [p for p in found if p.error is not None and p.run.source.counted]
    assert top.rows == len(counted)
    assert top.mean_abs_error == pytest.approx(
        sum(abs(p.error or 0.0) for p in counted) / len(counted)
    )
    inside = next(p for p in found if p.run.source.sample is Sample.IN and p.error is not None)
    moved = [
        dataclasses.replace(p, predicted_s=p.published_s * 10) if p is inside else p for p in found
    ]
    assert headline(moved) == top
    outside = counted[0]
    moved = [
        dataclasses.replace(p, predicted_s=p.published_s * 10) if p is outside else p for p in found
    ]
    assert headline(moved).max_abs_error == pytest.approx(9.0)


def test_every_row_says_in_or_out_of_sample_and_why(found: list[Prediction]) -> None:
    rows = [published._row(p) for p in found]
    assert all(r.sample in (Sample.IN, Sample.OUT) and r.sample_why for r in rows)
    mt_nlg = [r for r in rows if r.model.startswith("mt-nlg")]
    assert len(mt_nlg) == 3 and all(r.sample is Sample.IN for r in mt_nlg)
    assert all("transcription" in r.note for r in mt_nlg)


@pytest.mark.xfail(
    strict=True,
    reason="ACCURACY TARGET not met (issue 37: mean under 5%, no row over 10%, no framework "
    "biased by more than 5%): measured with the mixture-of-experts rows: 26 runs, mean |error| "
    "14.2%, max 27.1% (bloom-181b-bench-tp8-pp2); Megatron-DeepSpeed 2022 13.4%, NeMo 2024 "
    "17.6% (13 runs: the 9 Grok 1 rows of NeMo 24.12 21.5% too fast, -19.6% to -23.2%) and "
    "torchtitan 2024 13.5% too fast, Megatron-Core 2024 4.7% too fast, NeMo 2025 3.5% too "
    "slow (Grok 1's 512-GPU layout again, NeMo 25.04: 15.933 s against 24.12's 21.01 s); "
    "before them (2026-11-27) 16 runs, 10.8%, 27.1%, NeMo 2024 9.0% (13 runs, 11.0% before "
    "the CP and FSDP runs could be stated; the first run of the suite, before three constants "
    "were set to their stored records: 10.9%, 27.0%)",
)
def test_the_out_of_sample_accuracy_target(found: list[Prediction]) -> None:
    top = headline(found)
    assert top.mean_abs_error < 0.05 and top.max_abs_error < 0.10
    assert all(abs(bias) < 0.05 for _, bias in top.bias_by_framework.values())


def test_the_sensitivity_table_moves_each_recipe_choice(found: list[Prediction]) -> None:
    """Every predicted run reports the effect of flipping each recipe choice that exists
    (as a finite relative change), and of each filled field with a next value."""
    for p in found:
        if p.filled is None:
            continue
        recipe_keys = {k for k in p.sensitivity if k.startswith("recipe.")}
        assert {"recipe.blocking_p2p", "recipe.tp_comm_overlap"} <= recipe_keys
        assert all(math.isfinite(v) for v in p.sensitivity.values())
    table = published.sensitivity_markdown(found)
    assert table.count("\n") >= 1 + sum(1 for p in found if p.filled is not None)


def test_the_documentation_shows_what_the_suite_computes_now(found: list[Prediction]) -> None:
    """docs/reproductions/published-results.md is generated (``python -m
    validation.reproduce.published``); a change that moves a prediction must regenerate it."""
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / published.DOCS_PAGE
    expected = published.results_markdown(found, published.labelled_in_sample_rows())
    assert page.read_text().endswith(expected), (
        "regenerate it: python -m validation.reproduce.published"
    )
