"""The Horovod-style examples (examples/pytorch/hvd_*.py: a Horovod script with only its import
changed to ``import byteps.torch as hvd``) give the same results as the same scripts written
with byteps.torch's own names (push_pull instead of allreduce, ``bps`` instead of ``hvd``), in
2-worker jobs.  Both runs are seeded, so the final weights' checksum and the metrics must be equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("require_core")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pytorch"
# Each Horovod name the scripts use -> byteps.torch's own call.
BYTEPS_NAMES = [
    ("import byteps.torch as hvd  # the only change from a Horovod script", "import byteps.torch as bps"),
    ("hvd.allreduce(torch.tensor(val), name=name)", "bps.push_pull(torch.tensor(val), average=True, name=name)"),
    ('hvd.allreduce(torch.tensor(img_sec), op=hvd.Sum, name="img_sec")',
     'bps.push_pull(torch.tensor(img_sec), average=False, name="img_sec")'),
    (", op=hvd.Average)", ")"),
    ("hvd.", "bps."),
]


def _byteps_variant(text: str) -> str:
    for old, new in BYTEPS_NAMES:
        text = text.replace(old, new)
    assert "hvd." not in text and "as hvd " not in text
    return text


def _result(run_job, text: str, args: tuple) -> dict:
    result = run_job(2, 1, text, timeout=180, args=args)
    assert result.returncode == 0, result
    records = [json.loads(line.split("RESULT ", 1)[1]) for line in result.stdout.splitlines() if "RESULT {" in line]
    assert len(records) == 1, result
    return records[0]


@pytest.mark.parametrize("name, args, ignore", [
    ("hvd_train_digits.py", ("--epochs", "3"), ()),
    ("hvd_synthetic_benchmark.py", ("--num-iters", "2"), ("img_per_sec",)),
])
def test_horovod_example_equals_its_byteps_names_variant(run_job, name, args, ignore):
    pytest.importorskip("sklearn", reason="the digits example needs scikit-learn")
    text = (EXAMPLES / name).read_text()
    horovod_style = _result(run_job, text, args)
    byteps_style = _result(run_job, _byteps_variant(text), args)
    for key in ignore:
        assert horovod_style.pop(key) > 0 and byteps_style.pop(key) > 0
    assert horovod_style == byteps_style
    assert horovod_style["workers"] == 2
    if "accuracy" in horovod_style:
        assert horovod_style["accuracy"] > 0.8, horovod_style
