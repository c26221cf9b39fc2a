"""docs/custom_loop.md runs as written: its one Python block, with a smaller warm start and two
steps, trains (finite gradients, non-zero where a group's rewards differ) on the parts RLTrainer
uses, and logs through the run directory."""
import os
import re

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "custom_loop.md")


def _code() -> str:
  blocks = re.findall(r"```python\n(.*?)```", open(DOC).read(), flags=re.S)
  assert len(blocks) == 1, f"expected one python block in {DOC}, found {len(blocks)}"
  return blocks[0]


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
def test_custom_loop_guide_runs(tmp_path, capsys):
  code = _code()
  first = 'WORKDIR, WARM_STEPS, STEPS = "runs/custom_loop", 400, 20\n'
  assert code.startswith(first), "the guide's first line sets WORKDIR, WARM_STEPS and STEPS"
  code = f"WORKDIR, WARM_STEPS, STEPS = {str(tmp_path)!r}, 20, 2\n" + code[len(first):]
  scope: dict = {}
  exec(compile(code, DOC, "exec"), scope)
  lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("step ")]
  assert [l.split(":")[0] for l in lines] == ["step 0", "step 1"]
  norms = [float(l.rsplit(" ", 1)[1]) for l in lines]
  assert all(np.isfinite(norms))
  # a group whose sequence rewards differ has non-zero advantages, hence a non-zero gradient
  roll = scope["roll"]
  seq, groups = np.asarray(roll.rewards), np.asarray(roll.group_ids)
  if any(np.ptp(seq[groups == g]) > 0 for g in np.unique(groups)):
    assert norms[-1] > 0 and np.abs(np.asarray(scope["batch"].advantages)).max() > 0
  assert roll.local.shape == roll.tokens.shape
  # the same files as a trainer's run: one metrics.jsonl row per step
  from botjax.train import load_metrics
  rows = load_metrics(str(tmp_path / "run"))
  assert [r["step"] for r in rows] == [1, 2] and all("reward_mean" in r for r in rows)
