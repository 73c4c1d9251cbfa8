"""What every bench script shares: the repo root on sys.path and one place for results (bench/out)."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT / "lib"))


def save_json(name: str, data) -> Path:
    """Write `data` to bench/out/<name>.json and return the path."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=1))
    return path
