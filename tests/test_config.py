"""The typed configurations (contract/config) against the one schema (params.SCHEMA): a key added to either
without the other fails here, and the dicts that travel (a worker's params.json, the manifest's params) are the
ones the schema's check returned."""
import dataclasses
import json
import typing

import pytest

from kernelbook import params as P
from kernelbook.contract.config import BOOK_READS_FROM_CAPTURE, BookConfig, CaptureConfig

REPO = P.REPO


def _fields(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "other_params"]


def test_capture_config_has_a_field_for_every_capture_key_in_the_schemas_order():
    want = [k for k, spec in P.SCHEMA.items() if P.CAPTURE in spec.feeds]
    assert _fields(CaptureConfig) == want  # the order too: as_dict() writes the keys in the schema's order


def test_book_config_has_a_field_for_every_key_the_book_reads():
    want = {k for k, spec in P.SCHEMA.items() if any(f != P.CAPTURE for f in spec.feeds)}
    assert set(_fields(BookConfig)) == want | set(BOOK_READS_FROM_CAPTURE)
    assert all(P.CAPTURE in P.SCHEMA[k].feeds for k in BOOK_READS_FROM_CAPTURE)


def test_every_schema_key_has_a_field_somewhere():
    assert set(P.SCHEMA) == set(_fields(CaptureConfig)) | set(_fields(BookConfig))


@pytest.mark.parametrize("cls", [CaptureConfig, BookConfig])
def test_field_types_follow_the_schema(cls):
    hints = typing.get_type_hints(cls)
    for name in _fields(cls):
        spec = P.SCHEMA[name]
        types = spec.type if isinstance(spec.type, tuple) else (spec.type,)
        if spec.type is list:
            want = tuple[spec.items, ...]
        elif set(types) == {int, float}:
            want = float  # an int is a float to a type checker; the value stays as given
        else:
            (want,) = types
        if spec.nullable:
            want = want | None
        assert hints[name] == want, name


def test_the_workers_params_file_is_the_validated_dict_byte_for_byte():
    """ncu/params.json and raw/tp-params.json were json.dumps(params) of the validated dict: as_dict() gives it
    back, key for key and in order, so the file is the same bytes (checked on a committed run's file too)."""
    params = P.validate({"max_new_tokens": 8, "ncu_phases": ["decode"], "variant": "a label"}, consumer="capture")
    cfg = CaptureConfig.of(params)
    assert cfg.ncu_phases == ("decode",) and cfg.max_new_tokens == 8
    assert json.dumps(cfg.as_dict()) == json.dumps(params)
    again = CaptureConfig.of(json.loads(json.dumps(cfg.as_dict())))  # what the worker builds from the file
    assert again == cfg and json.dumps(again.as_dict()) == json.dumps(params)
    committed = json.loads((REPO / "data/runs/h100-deepseek-ocr-2/ncu/params.json").read_text())
    full = P.validate({k: v for k, v in committed.items() if k in P.SCHEMA}, consumer="capture")
    assert CaptureConfig.of(full).as_dict() == full  # a committed run's file, with any key added since defaulted


def test_capture_params_are_the_manifests_params():
    params = P.validate({"batch_size": 4, "prompt": "Summarize."})
    cfg = CaptureConfig.of(params)
    recorded = cfg.capture_params()
    assert recorded == P.for_consumer(params, P.CAPTURE)
    assert list(recorded) == list(P.for_consumer(params, P.CAPTURE))
    assert isinstance(recorded["ncu_phases"], list)  # the manifest's JSON is unchanged: a list, not a tuple


def test_book_config_round_trip():
    params = P.validate({"rank": 0, "high_pct": 70, "variant_runs": []}, consumer="book")
    cfg = BookConfig.of(params)
    assert cfg.variant_runs == () and cfg.high_pct == 70 and cfg.ncu_timeout_s == 1800
    assert cfg.as_dict() == {k: params[k] for k in _fields(BookConfig)}


def test_replace_derives_a_variant_and_leaves_the_original():
    cfg = CaptureConfig.of(P.validate({}, consumer="capture"))
    cold = dataclasses.replace(cfg, warmup=0, max_new_tokens=3)
    assert (cold.warmup, cold.max_new_tokens, cfg.warmup, cfg.max_new_tokens) == (0, 3, 1, 64)
    assert cold.as_dict() == {**cfg.as_dict(), "warmup": 0, "max_new_tokens": 3}  # the worker's file of the variant


def test_configs_are_frozen():
    cfg = CaptureConfig.of(P.validate({}, consumer="capture"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.warmup = 0
    book = BookConfig.of(P.validate({}, consumer="book"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        book.run_dir = "elsewhere"
    assert isinstance(book.variant_runs, tuple) and hash(cfg) == hash(dataclasses.replace(cfg))


def test_a_dict_the_schema_did_not_check_is_refused():
    with pytest.raises(KeyError):
        CaptureConfig.of({"max_new_tokens": 8})
