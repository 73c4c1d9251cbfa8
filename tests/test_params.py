"""Bad parameters: one message listing every problem, exit code 2, nothing written."""
import subprocess
import sys

import pytest
import yaml

from kernelbook import params as P
from kernelbook.runner import list_chapters, notebook_parameters

CASES = [
    ({"batch_size": 0}, "batch_size: 0 is below the minimum 1"),
    ({"batch_size": "4"}, "batch_size: expected int, got str"),
    ({"max_new_tokens": 10**6}, "max_new_tokens: 1000000 is above the maximum 4096"),
    ({"dtype": "int8"}, "dtype: 'int8' is not one of"),
    ({"crop_mode": "yes"}, "crop_mode: expected bool, got str"),
    ({"top_n": True}, "top_n: expected int, got bool"),
    ({"timeline_backend": "perfetto"}, "timeline_backend: 'perfetto' is not one of"),
    ({"ncu_phases": ["decode", "sampling"]}, "unknown phase(s) ['sampling']"),
    ({"run_dir": "data/runs/nope"}, "data/runs/nope does not exist and this machine cannot capture it"),
    ({"run_dir": "data/runs/nope", "capture": "never"}, "run directory data/runs/nope does not exist"),
    ({"capture": "always"}, "exists; capture: always never writes over a run"),
    ({"device": "NVIDIA Z9000"}, "unknown device 'NVIDIA Z9000'. Known devices: h100-sxm"),
    ({"omnidocbench_dir": "/no/such/dir"}, "directory /no/such/dir does not exist"),
    ({"model": "not a model"}, "unknown model 'not a model'"),
    ({"tpo_n": 3}, "tpo_n: unknown key"),
    ({"omnidocbench_subset": "params/default.yaml"}, "omnidocbench_subset: needs omnidocbench_dir"),
    ({"prompt": "  "}, "prompt: must not be blank"),
    ({"prompt": 42}, "prompt: expected str, got int"),
    ({"prompt_tokens": 0}, "prompt_tokens: 0 is below the minimum 1"),
    ({"prompt_tokens": 512.0}, "prompt_tokens: expected int, got float"),
    ({"prompt_tokens": 10**6}, "prompt_tokens: 1000000 is above the maximum 131072"),
]


@pytest.mark.parametrize("values,message", CASES)
def test_each_bad_parameter_is_named(values, message):
    with pytest.raises(P.ParamError) as e:
        P.validate(values)
    assert message in str(e.value)


def test_all_problems_in_one_message():
    with pytest.raises(P.ParamError) as e:
        P.validate({"batch_size": 0, "dtype": "int8", "foo": 1})
    assert len(e.value.problems) == 3
    assert "3 problem(s)" in str(e.value)


def test_cli_exit_code_2_and_nothing_written(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch_size: -1\ntop_n: many\n")
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--params", str(bad), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "batch_size: -1 is below the minimum 1" in proc.stderr and "top_n: expected int" in proc.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


def test_capture_without_gpu_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "capture", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert ("needs an NVIDIA GPU" in proc.stderr) or ("needs torch" in proc.stderr)
    assert not (tmp_path / "r").exists()


def test_unreadable_yaml(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("top_n: [1,\n")
    with pytest.raises(P.ParamError, match="not valid YAML"):
        P.load(p)


def test_every_yaml_key_is_a_parameter_of_the_notebooks_it_feeds():
    declared = {nb.stem: notebook_parameters(nb) for nb in list_chapters()}
    for yml in sorted(P.REPO.glob("params/*.yaml")):
        if yml.name in ("devices.yaml", "npus.yaml"):
            continue
        keys = yaml.safe_load(yml.read_text()) or {}
        if "grid" in keys:  # a study file (base, set, grid): test_study checks each of its points as a capture's
            continue
        for key in keys:
            assert key in P.SCHEMA, f"{yml.name}: {key} is not in the schema"
            for consumer in P.SCHEMA[key].feeds:
                if consumer != P.CAPTURE and consumer in declared:
                    assert key in declared[consumer], f"{key} feeds {consumer} but is not its parameter"
    # and the schema's book keys are parameters of the chapters they name
    for key, spec in P.SCHEMA.items():
        for consumer in spec.feeds:
            if consumer in declared:
                assert key in declared[consumer], f"schema says {key} feeds {consumer}"


def test_llm_workload_params_reach_the_manifest_and_chapter_00():
    """prompt, prompt_tokens, batch_size and max_new_tokens are capture params: the manifest records them
    (for_consumer) and chapter 00's parameter table shows them with their meaning."""
    from kernelbook.analyze.setup import params_table

    params = P.validate({"prompt": "Summarize the report.", "prompt_tokens": 2048, "batch_size": 8,
                         "max_new_tokens": 256})
    recorded = P.for_consumer(params, P.CAPTURE)
    assert {k: recorded[k] for k in ("prompt", "prompt_tokens", "batch_size", "max_new_tokens")} == {
        "prompt": "Summarize the report.", "prompt_tokens": 2048, "batch_size": 8, "max_new_tokens": 256}
    table = params_table({"params": recorded}).set_index("parameter")
    assert table.loc["prompt_tokens", "value"] == "2048" and table.loc["batch_size", "value"] == "8"
    assert table.loc["prompt_tokens", "meaning"].startswith("prompt made exactly this many tokens")


def test_an_install_puts_a_kernelbook_command_on_path():
    """`pip install` of the package gives a `kernelbook` command beside the interpreter (pyproject's
    [project.scripts]), named so in its own help, and exit 2 for a bad parameter as `python -m kernelbook` does."""
    from importlib.metadata import entry_points
    from pathlib import Path

    assert any(e.name == "kernelbook" and e.value == "kernelbook.cli:_console"
               for e in entry_points(group="console_scripts"))
    exe = Path(sys.executable).parent / "kernelbook"
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("usage: kernelbook ")
    bad = subprocess.run([str(exe), "book", "--language", "xx"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "language" in bad.stderr


def test_nsys_takes_a_sampled_long_generation():
    """nsys records a sampled long generation window by window (one report each), so the pair is a good parameter."""
    assert P.validate({"timeline_backend": "nsys", "sample_window": 8, "max_new_tokens": 2048},
                      consumer="capture")["sample_window"] == 8


def test_nsys_takes_tensor_parallel_ranks(tmp_path):
    """Tensor-parallel ranks under nsys are a good parameter (issue 46: each rank runs under its own nsys); only the
    checkpoint rule of tensor parallelism applies."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    got = P.validate({"timeline_backend": "nsys", "tensor_parallel": 2, "model": str(ckpt), "weights": "pretrained"},
                     consumer="capture")
    assert (got["timeline_backend"], got["tensor_parallel"]) == ("nsys", 2)
