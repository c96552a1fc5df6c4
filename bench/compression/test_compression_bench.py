"""Smoke test of the compression benchmark (bench/compression): its arithmetic, and the runner
end to end on loopback (``--local``: bpsrun, 2 workers, 1 server), tiny runs with no
compression and with onebit.  The onebit runs need issue 32's compression in the core and
``byteps.torch.Compression.named``; where that is missing the test checks the runner says so.
About 45-60 s (five small jobs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "python", REPO):  # byteps, tools and bench of this checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from tools.localjob import missing_core  # noqa: E402

from bench.compression import report, run  # noqa: E402


def test_time_to_target_is_the_first_epoch_reaching_it() -> None:
    curve = [{"epoch": 1, "accuracy": 0.5, "train_time_s": 1.0}, {"epoch": 2, "accuracy": 0.9, "train_time_s": 2.0},
             {"epoch": 3, "accuracy": 0.95, "train_time_s": 3.0}]
    assert report.time_to(curve, 0.9) == 2.0
    assert report.time_to(curve, 0.96) is None


def test_summary_derives_target_bytes_and_speedup() -> None:
    curve = lambda accs: [{"epoch": i + 1, "accuracy": a, "train_time_s": float(i + 1)}  # noqa: E731
                          for i, a in enumerate(accs)]
    doc = {"setup": {"where": "test", "epochs": 3},
           "digits": [{"compressor": "none", "accuracy": 0.96, "curve": curve([0.8, 0.9, 0.96]),
                       "pushed_bytes_per_step": 1000.0, "iter_time_s": 0.01},
                      {"compressor": "onebit", "accuracy": 0.94, "curve": curve([0.7, 0.95, 0.94]),
                       "pushed_bytes_per_step": 40.0, "iter_time_s": 0.005},
                      {"compressor": "topk", "error": "exit code 1, no RESULT line", "tail": "boom"}],
           "vgg16": [{"label": "compute", "iter_time_s": 10.0, "compute_time_s": 9.9},
                     {"label": "none", "iter_time_s": 40.0}, {"label": "onebit", "iter_time_s": 16.0}]}
    report.summarise(doc)
    assert doc["target_accuracy"] == 0.95
    assert doc["digits"][0]["time_to_target_s"] == 3.0 and doc["digits"][1]["time_to_target_s"] == 2.0
    assert doc["digits"][1]["pushed_vs_none"] == 0.04
    assert doc["vgg16_summary"] == {"compute_time_s": 10.0, "profile_compute_time_s": 9.9, "none_iter_time_s": 40.0,
                                    "bound": 4.0, "compressed": "onebit", "compressed_iter_time_s": 16.0,
                                    "speedup": 2.5}
    text = report.tables(doc)
    assert "topk        failed: exit code 1" in text and "boom" in text
    assert "bound (uncompressed / compute): 4.00" in text


def test_none_runs_first() -> None:
    args = run.parse_args(["--compressors", "onebit,none,topk"])
    assert args.compressors == ["none", "onebit", "topk"]
    with pytest.raises(SystemExit):
        run.parse_args(["--compressors", "zip"])


def _compression_api() -> bool:
    """Issue 32's compression in both the plugin and the core this checkout built."""
    import byteps.torch as bps  # noqa: PLC0415
    from byteps import _basics  # noqa: PLC0415

    core = _basics.core()
    return (hasattr(bps.Compression, "named") and hasattr(core, "declare_tensor_params")
            and hasattr(core, "set_learning_rate"))


# What a run asking for a compressor says where the plugin or the core predates compression.
MISSING = ("Compression.named", "this byteps core has no")


def test_end_to_end_local(tmp_path) -> None:
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("sklearn")
    pytest.importorskip("byteps.torch")
    out = tmp_path / "out"
    rc = run.main(["--local", "--n", "2", "--k", "1", "--epochs", "2", "--compressors", "none,onebit",
                   "--iters", "2", "--warmup", "1", "--time-scale", "0.002", "--shrink", "64", "--timeout", "120",
                   "--out", str(out)])
    doc = json.loads((out / "compression.json").read_text())
    digits = {r["compressor"]: r for r in doc["digits"]}
    vgg = {r["label"]: r for r in doc["vgg16"]}
    none = digits["none"]
    assert "error" not in none, none
    assert none["compression"] == "none" and none["workers"] == 2 and len(none["curve"]) == 2
    assert 0 < none["accuracy"] <= 1 and none["iter_time_s"] > 0
    # Gradients of 17,226 float32 parameters a step, plus the first step's declarations.
    assert 17226 * 4 <= none["pushed_bytes_per_step"] < 17226 * 4 * 1.2, none
    assert "error" not in vgg["compute"] and "error" not in vgg["none"], doc["vgg16"]
    assert vgg["none"]["iter_time_s"] >= 0.95 * vgg["compute"]["iter_time_s"]
    assert doc["vgg16_summary"]["bound"] > 0
    if _compression_api():
        assert rc == 0, doc
        onebit = digits["onebit"]
        assert onebit["compression"] == "onebit" and onebit["accuracy"] > 0.5, onebit
        assert onebit["pushed_bytes_per_step"] < 0.2 * none["pushed_bytes_per_step"], onebit  # 1 bit, not 32
        assert doc["vgg16_summary"]["speedup"] > 0
    else:  # before issue 32's core: the onebit runs fail, saying why
        assert rc == 1
        assert any(m in digits["onebit"]["tail"] for m in MISSING), digits["onebit"]
        assert any(m in vgg["onebit"]["tail"] for m in MISSING), vgg["onebit"]
