"""The gallery script regenerates every committed figure, quickly, into any folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

GALLERY = Path(__file__).resolve().parents[2] / "docs" / "gallery"


def gallery_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gallery_make", GALLERY / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gallery_script_writes_every_committed_figure(tmp_path: Path) -> None:
    written = gallery_script().make(tmp_path)
    names = {path.name for path in written}
    assert {f"timeline-{n}.png" for n in ("gpipe", "1f1b", "zbv", "dualpipev")} <= names
    assert {"speedup.png", "bubble.png", "throughput-a100.png", "memory-over-time.png"} <= names
    assert {"validation-gpipe-table2.png", "plan-pareto.png", "synthesis-memory.png"} <= names
    committed = {path.name for path in GALLERY.glob("*.png")}
    assert committed == names  # the committed gallery is what the script makes, no more
    for path in written:
        assert 5_000 < path.stat().st_size < 200_000, path  # drawn, and small
    readme = (GALLERY / "README.md").read_text()
    assert all(f"]({name})" in readme for name in names)
