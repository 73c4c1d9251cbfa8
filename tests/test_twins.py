"""The eager run and the run as deployed find each other (load.twins), whichever the book is given."""
from pathlib import Path

import pytest

from kernelbook.load.run import load_run
from kernelbook.load.twins import FOUND_HOST, FOUND_NAMED, FOUND_SIBLING, find_twin, is_twin, twins
from kernelbook.contract.manifest import read_manifest

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"
EAGER, GRAPHS = RUNS / "h100-deepseek-ocr-2", RUNS / "h100-variant-static-graphs"


@pytest.mark.parametrize("given", [EAGER, GRAPHS])
def test_the_bundled_pair_finds_itself_from_either_side(given):
    t = twins(load_run(given))
    assert (t.eager.run_id, t.deployed.run_id) == (EAGER.name, GRAPHS.name)
    assert t.subject is t.deployed and t.found == FOUND_HOST and t.same_host
    assert t.other.path != given


def test_the_long_generation_pairs_with_the_long_graph_run():
    path, found, same_host = find_twin(RUNS / "h100-long-generation-2048")
    assert path.name == "h100-long-generation-2048-graphs" and found == FOUND_SIBLING and not same_host
    assert find_twin(RUNS / "h100-long-generation-256")[0] is None  # no 256-token graph run is committed


@pytest.mark.parametrize("name", ["h100-variant-eager-attention", "h100-variant-batch8", "h200-deepseek-ocr-2",
                                  "qwen3-moe-h100"])
def test_other_work_or_another_gpu_is_no_twin(name):
    assert not is_twin(read_manifest(RUNS / name), read_manifest(GRAPHS))
    assert find_twin(RUNS / name)[0] is None


def test_a_named_twin_is_taken_and_a_named_stranger_is_not(tmp_path):
    assert find_twin(EAGER, named=GRAPHS)[1] == FOUND_NAMED
    # naming a run of other work falls back to the search
    assert find_twin(EAGER, named=RUNS / "h100-variant-batch8")[1] == FOUND_HOST


def test_chapter_05s_conclusions_are_the_same_from_either_run():
    """Chapter 05's headline leads with the run as deployed and sets the eager run beside it, whichever the book
    was given; the deployed decode's first opportunity is not CUDA graphs (it runs as graphs)."""
    from kernelbook.analyze import classify as C
    from kernelbook.narrate import classify as NC

    lines = []
    for given in (EAGER, GRAPHS):
        t = twins(load_run(given))
        dep = (t.deployed, *C.classified(t.deployed))
        eag = (t.eager, *C.classified(t.eager))
        lines.append(NC.pair_headline(dep, eag, "decode"))
        assert "graph" not in dep[2]["decode"].opportunity.iloc[0].lower().replace("graph replays", "")
    assert lines[0] == lines[1] and lines[0].startswith(f"As deployed ({GRAPHS.name})")
