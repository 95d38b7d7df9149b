"""Framework files on the command line: a Megatron-LM launch, a torchtitan job TOML and a Hugging
Face ``config.json`` each simulate number for number as the same run stated by pipesim's flags;
a plan is written back as both frameworks' files, whose layout reads back; refusals are one
line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.run_file import read_run_source
from pipesim.config.run_file import load_run_file

from .test_schedule_cli import run, simulated

ROOT = Path(__file__).resolve().parents[2]
MEGATRON = ROOT / "tests" / "config" / "fixtures" / "megatron"
TORCHTITAN = ROOT / "tests" / "config" / "fixtures" / "torchtitan"
HUGGING_FACE = ROOT / "tests" / "workload" / "fixtures" / "huggingface"


def _same_numbers(a: dict[str, object], b: dict[str, object]) -> None:
    """Every field equal but the costs' one-line description, which names the model as its
    source names it (megatron-gpt, llama-3.1-8b)."""
    assert {k: v for k, v in a.items() if k != "costs"} == {
        k: v for k, v in b.items() if k != "costs"
    }


def test_the_sc21_145b_launch_simulates_as_table_1s_row_stated_by_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Megatron-LM's own reproduction script for Table 1's 145.6B row (T=8, P=8, 1,536 GPUs,
    interleaved with 5 layers per virtual stage, full recomputation)."""
    translated = simulated(
        capsys,
        "--megatron-args",
        str(MEGATRON / "sc21_table1_145.6b.txt"),
        "--hardware",
        "a100",
        "--world-size",
        "1536",
        "--allow-ignored",
    )
    by_flags = simulated(
        capsys,
        *("--model", "megatron-145.6b", "--hardware", "a100", "--recipe", "megatron-lm-2021"),
        *("--tensor-parallel", "8", "-K", "8", "--data-parallel", "24"),
        *("--schedule", "interleaved-1f1b", "-v", "2", "-M", "48", "--batch", "2304"),
        *("--recompute", "full", "--partition", "blocks"),
    )
    _same_numbers(translated, by_flags)


def test_a_torchtitan_job_simulates_as_the_same_run_stated_by_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    translated = simulated(
        capsys,
        "--torchtitan",
        str(TORCHTITAN / "llama3_8b_ddp8.toml"),
        "--hardware",
        "h100",
        "--allow-ignored",
    )
    by_flags = simulated(
        capsys,
        *("--model", "llama3-8b", "--hardware", "h100", "--recipe", "torchtitan"),
        *("--data-parallel", "8", "-K", "1", "--schedule", "1f1b", "-M", "1", "--batch", "8"),
        *("--recompute", "selective", "--partition", "34"),
    )
    assert translated == by_flags


def test_a_torchtitan_fsdp_job_simulates_as_zero_3_stated_by_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """torchtitan's shipped Llama 3 8B config on 64 GPUs: the shard degree -1 is FSDP over all
    64, pipesim's ZeRO-3 with torchtitan's default reshard policy, in bf16."""
    translated = simulated(
        capsys,
        "--torchtitan",
        str(TORCHTITAN / "llama3_8b.toml"),
        *("--hardware", "h100", "--world-size", "64", "--allow-ignored"),
    )
    by_flags = simulated(
        capsys,
        *("--model", "llama3-8b", "--hardware", "h100", "--recipe", "torchtitan"),
        *("--data-parallel", "64", "--zero", "3", "--reshard-after-forward", "default"),
        *("-K", "1", "--schedule", "1f1b", "-M", "1", "--batch", "64"),
        *("--recompute", "selective", "--partition", "34"),
    )
    assert translated == by_flags


def test_a_hugging_face_config_simulates_as_the_catalogue_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Llama 3.1 8B's config.json at the catalogue's sequence is the catalogue's llama3-8b."""
    shape = ("--hardware", "h100", "-K", "4", "--schedule", "1f1b", "-M", "8", "--batch", "8")
    from_config = simulated(
        capsys,
        "--model",
        str(HUGGING_FACE / "llama-3.1-8b.json"),
        "--seq-length",
        "8192",
        *shape,
    )
    _same_numbers(from_config, simulated(capsys, "--model", "llama3-8b", *shape))


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--megatron-args", str(MEGATRON / "sc21_table1_1.7b.txt"), "--hardware", "a100"],
            "--allow-ignored would list it as ignored",
        ),
        (["--megatron-args", str(MEGATRON / "sc21_table1_1.7b.txt")], "needs --hardware"),
        (
            [
                "--torchtitan",
                str(TORCHTITAN / "llama3_405b.toml"),
                *("--hardware", "h100", "--world-size", "128"),  # said before the rest
            ],
            "model.converters",
        ),
        (
            [
                "--torchtitan",
                str(TORCHTITAN / "llama3_8b_ddp8.toml"),
                "--run",
                "x.toml",
                "--hardware",
                "h100",
            ],
            "give one file describing the run",
        ),
        (
            [
                "--model",
                str(HUGGING_FACE / "dbrx-moe.json"),
                "--hardware",
                "h100",
                "--schedule",
                "1f1b",
                "-K",
                "2",
                "-M",
                "4",
            ],
            "mixture-of-experts model_type 'dbrx' is not read yet",
        ),
    ],
)
def test_a_file_pipesim_cannot_state_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    status, out, err = run(capsys, "simulate", *argv)
    assert (status, out) == (2, ""), err
    assert err.startswith("pipesim: error: ") and err.count("\n") == 1 and said in err, err


def test_a_plan_is_written_back_as_framework_files_whose_layout_reads_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The Megatron-LM arguments of each plan translate back to the plan's layout (T, P, v,
    D, M, b, recomputation, sequence parallelism, ZeRO); the torchtitan file names what it
    cannot express."""
    out_dir = tmp_path / "plans"
    status, out, err = run(
        capsys,
        "plan",
        *("--model", "megatron-1.7b", "--hardware", "a100", "--devices", "32"),
        *("--batch", "512", "--top", "2", "--recipe", "megatron-lm-2022"),
        *("--schedules", "1f1b,interleaved-1f1b", "--export", str(out_dir), "--json"),
    )
    assert status == 0, err
    assert len(json.loads(out)["plans"]) == 2
    layout = (
        "tensor_parallel",
        "sequence_parallel",
        "pipeline_parallel",
        "chunks",
        "data_parallel",
        "microbatches",
        "microbatch_size",
        "batch",
        "recompute",
        "zero",
        "schedule",
    )
    for rank in (1, 2):
        planned = load_run_file(out_dir / f"plan-{rank}.toml")
        found = read_run_source(
            [
                "--megatron-args",
                str(out_dir / f"plan-{rank}.megatron.args"),
                "--hardware",
                "a100",
                "--world-size",
                "32",
            ]
        )
        assert found is not None
        translated = found[0]
        assert {k: getattr(translated, k) or 0 for k in layout} == {
            k: getattr(planned, k) or 0 for k in layout
        }
        titan = (out_dir / f"plan-{rank}.torchtitan.toml").read_text()
        assert "# not expressed: model 'megatron-1.7b' is not a torchtitan llama3 flavor" in titan


def test_run_show_keeps_a_translation_as_a_run_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = [
        "--megatron-args",
        str(MEGATRON / "sc21_table1_1.7b.txt"),
        "--hardware",
        "a100",
        "--world-size",
        "32",
        "--allow-ignored",
    ]
    kept = tmp_path / "kept.toml"
    status, out, err = run(capsys, "run", "show", *source, "--write", str(kept))
    assert status == 0, err
    assert "parameters 1.6" in out and "note       --data-path" in out
    _same_numbers(simulated(capsys, "--run", str(kept)), simulated(capsys, *source))


def test_a_plan_of_a_hugging_face_model_at_its_sequence_reproduces_from_its_run_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The plan's run file and its printed command keep --seq-length (without it the config's
    131,072 tokens would be simulated: 100 times slower)."""
    out_dir = tmp_path / "plans"
    config = str(HUGGING_FACE / "llama-3.1-8b.json")
    status, out, err = run(
        capsys,
        "plan",
        *("--model", config, "--seq-length", "8192", "--hardware", "h100"),
        *("--devices", "16", "--batch", "64", "--top", "1", "--export", str(out_dir), "--json"),
    )
    assert status == 0, err
    best = json.loads(out)["plans"][0]
    assert "--seq-length 8192" in best["simulate_command"]
    again = simulated(capsys, "--run", str(out_dir / "plan-1.toml"))
    assert again["iteration_time"] == best["iteration_time"]


def test_a_megatron_option_given_twice_is_noted_and_the_last_used(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """As Megatron-LM's argparse does, said on stderr (a script's default overridden later)."""
    script = (MEGATRON / "sc21_table1_1.7b.txt").read_text()
    assert script.count("--num-layers 24") == 1
    path = tmp_path / "twice.sh"
    path.write_text(script.replace("--num-layers 24", "--num-layers 24 --num-layers 12"))
    source = ["--megatron-args", str(path), "--hardware", "a100", "--world-size", "32"]
    status, out, err = run(capsys, "run", "show", *source, "--allow-ignored", "--json")
    assert status == 0, err
    shown = json.loads(out)
    assert shown["model"]["architecture"]["layers"] == 12
    assert any(
        note.startswith("--num-layers given 2 times: the last, --num-layers 12")
        for note in shown["notes"]
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--run", "a.toml", "--run", "b.toml"], "--run given 2 times"),
        (
            ["--schedule", "1f1b", "-K", "2", "-M", "4", "--costs", "1,2", "--world-size", "8"],
            "--world-size only serves --megatron-args or --torchtitan",
        ),
    ],
)
def test_a_run_source_given_twice_or_a_translation_flag_alone_is_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    status, out, err = run(capsys, "simulate", *argv)
    assert (status, out) == (2, "") and said in err and err.count("\n") == 1, err


CORE_LINE = (
    "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
    "--max-position-embeddings 1024 --tensor-model-parallel-size 2 --sequence-parallel "
    "--pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 8 --bf16 "
    "--use-flash-attn "  # the line is Megatron-Core's with or without --tp-comm-overlap
)


def test_megatron_s_gemm_overlap_simulates_as_the_flag_and_its_scatter_opt_out_is_said(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--tp-comm-overlap in a launch is --tp-comm-overlap beside the launch without it; sc21's
    --no-scatter-gather-tensors-in-pipeline is read (run show --write keeps it) but, a
    recipe's own true being turned off by no flag, simulated as the recipe's, and said."""
    path = tmp_path / "core.sh"
    path.write_text(CORE_LINE + "--tp-comm-overlap\n")
    plain = tmp_path / "plain.sh"
    plain.write_text(CORE_LINE + "\n")
    source = ["--hardware", "a100", "--world-size", "4", "--schedule", "1f1b"]
    overlapped = simulated(capsys, "--megatron-args", str(path), *source)
    assert overlapped["recipe"]["name"] == "megatron-core-2024+tp_comm_overlap"  # type: ignore[index]
    flagged = simulated(capsys, "--megatron-args", str(plain), *source, "--tp-comm-overlap")
    assert overlapped == flagged
    assert overlapped != simulated(capsys, "--megatron-args", str(plain), *source)
    sc21 = tmp_path / "sc21.sh"
    sc21.write_text(
        (MEGATRON / "sc21_table1_145.6b.txt").read_text().rstrip()
        + " --no-scatter-gather-tensors-in-pipeline\n"
    )
    megatron = ["--megatron-args", str(sc21), "--hardware", "a100", "--world-size", "1536"]
    kept = tmp_path / "kept.toml"
    status, out, err = run(
        capsys, "run", "show", *megatron, "--allow-ignored", "--write", str(kept)
    )
    assert status == 0, err
    assert load_run_file(kept).scatter_gather_p2p is False
    status, out, err = run(capsys, "simulate", *megatron, "--allow-ignored", "--json")
    assert status == 0 and json.loads(out)["recipe"]["scatter_gather_p2p"] is False


# DeepSeek-V2-Lite as a Megatron-Core launch trains it: latent attention, 64 routed experts
# and 2 shared after one dense block, the alltoall dispatcher; CP 2 and EP 8 on 16 GPUs.
DEEPSEEK_LINE = """\
--num-layers 27 --hidden-size 2048 --ffn-hidden-size 10944 --num-attention-heads 16 \\
--seq-length 4096 --max-position-embeddings 4096 --swiglu --normalization RMSNorm \\
--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear \\
--attention-dropout 0.0 --hidden-dropout 0.0 --tokenizer-type NullTokenizer \\
--vocab-size 102399 --multi-latent-attention --kv-lora-rank 512 --qk-head-dim 128 \\
--qk-pos-emb-head-dim 64 --v-head-dim 128 --qk-layernorm --num-experts 64 \\
--moe-router-topk 6 --moe-ffn-hidden-size 1408 --moe-shared-expert-intermediate-size 2816 \\
--moe-layer-freq '([0]*1+[1]*26)' --moe-router-load-balancing-type seq_aux_loss \\
--moe-aux-loss-coeff 0.001 --moe-token-dispatcher-type alltoall --moe-grouped-gemm --bf16 \\
--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 14 \\
--decoder-last-pipeline-num-layers 13 --context-parallel-size 2 \\
--expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 32 \\
--use-distributed-optimizer
"""


def test_a_megatron_moe_launch_with_cp_and_ep_simulates_as_the_catalogue_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The launch's experts and latent attention are the catalogue's deepseek-v2-lite, its CP
    and EP pipesim's: number for number the run stated by flags (D = 16 / (P x CP) = 4)."""
    path = tmp_path / "deepseek.sh"
    path.write_text(DEEPSEEK_LINE)
    translated = simulated(
        capsys,
        *("--megatron-args", str(path), "--hardware", "h100", "--world-size", "16"),
        "--allow-ignored",
    )
    by_flags = simulated(
        capsys,
        *("--model", "deepseek-v2-lite", "--hardware", "h100", "--recipe", "megatron-core-2024"),
        *("-K", "2", "--data-parallel", "4", "--context-parallel", "2", "--expert-parallel", "8"),
        *("--zero", "1", "--schedule", "1f1b", "-M", "8", "--batch", "32"),
        *("--partition", "15,14"),
    )
    _same_numbers(translated, by_flags)


def test_a_torchtitan_context_parallel_job_simulates_as_the_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """torchtitan's CP is FSDP over dp_shard x cp and PyTorch's all-gathering ring attention:
    pipesim's ZeRO-3 with --context-parallel and --context-exchange all-gather."""
    path = tmp_path / "cp.toml"
    path.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n'
        "[training]\nlocal_batch_size = 2\nseq_len = 8192\n"
        "[parallelism]\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 2\n"
        "context_parallel_degree = 2\n"
        '[activation_checkpoint]\nmode = "full"\n'
    )
    translated = simulated(
        capsys, "--torchtitan", str(path), "--hardware", "h100", "--world-size", "16"
    )
    by_flags = simulated(
        capsys,
        *("--model", "llama3-8b", "--hardware", "h100", "--recipe", "torchtitan"),
        *("--tensor-parallel", "2", "--sequence-parallel", "--context-parallel", "2"),
        *("--context-exchange", "all-gather", "--data-parallel", "4", "--zero", "3"),
        *("--reshard-after-forward", "default", "-K", "1", "--schedule", "1f1b", "-M", "1"),
        *("--microbatch-size", "2", "--batch", "8", "--recompute", "full", "--partition", "34"),
    )
    assert translated == by_flags
