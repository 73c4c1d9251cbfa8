"""Parameters are bounded (issue 39, item 3): a hostile or careless params file (an alias bomb, a megabyte value,
latin-1 bytes, a page of unknown keys) ends in one short message and exit code 2, with nothing written, however
large the value it stands for."""
import os
import subprocess
import sys

import pytest

from kernelbook import params as P

# the "billion laughs": nine levels of nine aliases, 9^9 strings written in 600 bytes; before these bounds such a
# file ran 254 s, took 9.3 GB and wrote 2.1 GB of message before a MemoryError traceback (issue 39)
BOMB = "\n".join(
    ['lol0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"lol{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    + ["top_n: *l8", ""])

MESSAGE_BYTES = 2048  # one message: a header, a line per problem, the known keys once


def book(tmp_path, content: bytes, name: str = "params.yaml") -> subprocess.CompletedProcess:
    """`python -m kernelbook book --params <name> --chapters 00_setup --out r`, run in `tmp_path` as a user
    would run it, with `content` as the params file."""
    (tmp_path / name).write_bytes(content)
    return subprocess.run([sys.executable, "-m", "kernelbook", "book", "--params", name, "--chapters", "00_setup",
                           "--out", "r"], cwd=tmp_path, capture_output=True, text=True, timeout=120)


def assert_refused(proc, tmp_path, *fragments, name="params.yaml"):
    """Exit 2, one short message holding `fragments`, no traceback, and nothing written beside the params file."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("problem(s) in") == 1
    assert len(proc.stderr.encode()) < MESSAGE_BYTES, proc.stderr[:3000]
    for fragment in fragments:
        assert fragment in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_alias_bomb_is_refused_at_its_first_alias(tmp_path):
    proc = book(tmp_path, BOMB.encode())
    # lol1's first *l0, after `lol1: &l1 [` (11 characters): an alias is refused before any value is built
    assert_refused(proc, tmp_path, "line 2, column 12: YAML aliases (*l0) are not accepted in a params file: "
                                   "write the value out")


def test_latin1_file_names_the_byte_and_asks_for_utf8(tmp_path):
    proc = book(tmp_path, "top_n: 3\nprompt: \"café\"\n".encode("latin-1"))
    # 'é' is 0xe9 in latin-1, the 13th byte of line 2 (`prompt: "caf` is 12)
    assert_refused(proc, tmp_path, "byte 0xe9 at line 2, column 13 is not UTF-8: save the file as UTF-8")


def test_file_over_the_limit_is_refused_unread(tmp_path):
    content = b"prompt: \"" + b"x" * (P.MAX_FILE_BYTES + 1) + b"\"\n"
    proc = book(tmp_path, content)
    assert_refused(proc, tmp_path, "the file is larger than 1 MiB: a params file is a page of key: value overrides")


def test_big_value_is_quoted_short(tmp_path):
    proc = book(tmp_path, b"top_n: \"" + b"x" * 900_000 + b"\"\n")
    assert_refused(proc, tmp_path, "top_n: expected int, got str ('xxxx")
    line = next(s for s in proc.stderr.splitlines() if s.startswith("  - top_n:"))
    assert len(line) < len("  - top_n: expected int, got str ()") + P.SHOWN_CHARS + 1


def test_unknown_keys_each_named_and_the_key_list_said_once(tmp_path):
    unknown = ["tpo_n", "batch", "langauge", "foo1", "foo2", "foo3", "foo4", "foo5", "foo6"]
    proc = book(tmp_path, "".join(f"{k}: 1\n" for k in unknown).encode())
    assert_refused(proc, tmp_path, "9 problem(s)", "tpo_n: unknown key (did you mean top_n?)",
                   "batch: unknown key (did you mean batch_size?)", "langauge: unknown key (did you mean language?)")
    assert proc.stderr.count("known keys:") == 1
    assert proc.stderr.count("unknown key") == len(unknown)


def test_the_repository_params_files_read_as_before(tmp_path):
    """The bounded reader leaves a normal file alone: each file in params/ reads as yaml.safe_load reads it,
    and an anchor without an alias is plain YAML."""
    import yaml

    for yml in sorted(P.REPO.glob("params/*.yaml")):
        assert P._read_file(yml) == (yaml.safe_load(yml.read_text()) or {}), yml.name
    (tmp_path / "p.yaml").write_text("top_n: &n 12\nphase: decode\n")
    assert P.load(tmp_path / "p.yaml")["top_n"] == 12


@pytest.mark.parametrize("content,message", [
    ("top_n: " + "[" * 2000 + "]" * 2000, f"nested more than {P.MAX_YAML_DEPTH} levels deep"),
    ("top_n: [" + "1," * P.MAX_YAML_VALUES + "1]", f"more than {P.MAX_YAML_VALUES} values"),
    ("top_n: 2024-13-01", "not valid YAML at line 1, column 8: cannot read this value: month must be in 1..12"),
    pytest.param("top_n: " + "1" * 5000, "cannot read this value: Exceeds the limit (4300 digits)",
                 marks=pytest.mark.skipif(not hasattr(sys, "get_int_max_str_digits"),
                                          reason="Python before 3.10.7 reads integers of any length")),
    ("top_n: !<" + "x" * 100_000 + "> 3", "could not determine a constructor for the tag"),
    ("top_n: \"a\x00\"", "not valid YAML at line 1, column 10: character #x0000 is not allowed"),
    ("top_n: [1,\n", "not valid YAML at line 2, column 1"),
    ("[1, 2]", "expected a mapping of key: value, got list"),
])
def test_what_yaml_cannot_hold_is_one_short_problem(tmp_path, content, message):
    p = tmp_path / "p.yaml"
    p.write_text(content)
    with pytest.raises(P.ParamError) as e:
        P.load(p)
    assert len(e.value.problems) == 1 and message in e.value.problems[0]
    assert len(str(e.value)) < MESSAGE_BYTES


def test_not_a_regular_file(tmp_path):
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    with pytest.raises(P.ParamError, match="is not a regular file"):
        P.load(fifo)


def test_empty_file_is_the_defaults(tmp_path):
    (tmp_path / "p.yaml").write_text("# nothing overridden\n")
    assert P.load(tmp_path / "p.yaml")["top_n"] == P.SCHEMA["top_n"].default


def test_short_quote_never_walks_the_value():
    """A value shared nine levels deep (what the bomb would load as) stands for 9^8 = 43 million strings; its
    short quote reads 4 items of 2 levels."""
    value = ["lol"] * 9
    for _ in range(7):
        value = [value] * 9
    quoted = P.shown(value)
    assert len(quoted) <= P.SHOWN_CHARS and quoted.startswith("[[")
    problems = P._check_one("top_n", P.SCHEMA["top_n"], value)
    assert problems == [f"top_n: expected int, got list ({quoted})"]


def test_every_message_quotes_a_value_short():
    long = "x" * 100_000
    with pytest.raises(P.ParamError) as e:
        P.validate({"dtype": long, "ncu_phases": ["decode", long], "variant_runs": [long], "max_new_tokens": 10**4000,
                    "model": long, "weights": long + " y", "device": long, "omnidocbench_dir": "/" + long,
                    "run_dir": long, "capture": "never"})
    assert len(e.value.problems) == 9
    text = str(e.value)
    assert "x" * P.SHOWN_CHARS not in text  # each value cut to its first and last ~38 characters
    for fragment in ("dtype: 'xxxx", "ncu_phases: unknown phase(s) ['xxxx", "variant_runs: run directory xxxx",
                     "max_new_tokens: 1000000", "is above the maximum 4096", "unknown model 'xxxx",
                     "weights 'xxxx", "unknown device 'xxxx", "omnidocbench_dir: directory /xxxx",
                     "run_dir: run directory xxxx"):
        assert fragment in text
    assert len(text) < 3 * MESSAGE_BYTES


def test_wrong_list_item_is_quoted_short():
    with pytest.raises(P.ParamError) as e:
        P.validate({"ncu_phases": ["decode", ["x" * 100_000] * 1000]})
    assert e.value.problems[0].startswith("ncu_phases: expected a list of str, got [")
    assert len(e.value.problems[0]) < 150


def test_paths_the_system_refuses_are_named_not_raised():
    # too long for the filesystem (ENAMETOOLONG), a NUL byte, and the home of no user (RuntimeError on expansion)
    for path in ("a" * 10_000, "a\x00b", "~no_such_user_kernelbook/run"):
        with pytest.raises(P.ParamError, match="does not exist"):
            P.validate({"run_dir": path, "capture": "never"})
        with pytest.raises(P.ParamError, match="does not exist"):
            P.load(None, {"run_dir": path, "capture": "never"}, base=P.REPO)


def test_nan_and_wrong_types_are_problems_not_exceptions():
    with pytest.raises(P.ParamError) as e:
        P.validate({"high_pct": float("nan"), "tensor_parallel": "2", 1: 2, None: 3})
    assert e.value.problems == ["1: unknown key", "None: unknown key", "high_pct: must be a number, not nan",
                                "tensor_parallel: expected int, got str ('2')"]


def test_thousands_of_problems_show_the_first_twenty():
    with pytest.raises(P.ParamError) as e:
        P.validate({f"key{i}": 1 for i in range(5000)})
    assert len(e.value.problems) == 5000
    text = str(e.value)
    assert text.count("unknown key") == P.MAX_PROBLEMS_SHOWN and "... and 4980 more" in text
    assert text.count("known keys:") == 1 and len(text) < MESSAGE_BYTES
