"""docs/extending.md runs as written: its Python blocks, in order in one scope, with a smaller
warm start, smaller steps and two steps per run: a registered estimator trains and resumes, a
token-level reward combined with MathReward shows in inspect_batch and in the local/ metrics,
a run's metrics and parameters load back, and a hook's value is logged."""
import os
import re

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "extending.md")
FIRST = 'WORKDIR, WARM, SET, STEPS = "runs/extending", {}, [], 10\n'


def _blocks() -> list[str]:
  return re.findall(r"```python\n(.*?)```", open(DOC).read(), flags=re.S)


def test_the_guide_has_a_block_per_task():
  blocks = _blocks()
  assert len(blocks) == 5 and blocks[0].startswith(FIRST)
  assert "register_estimator" in blocks[1] and "inspect_batch" in blocks[2]
  assert "load_params" in blocks[3] and "add_hook" in blocks[4]


@pytest.mark.e2e   # run end to end as a user runs it (so also slow); .ci/run runs these
def test_extending_guide_runs(tmp_path, capsys):
  blocks = _blocks()
  small = ["rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=32",
           "progress=false"]
  warm = {"warm_steps": 20, "num_train": 200, "num_eval": 8}
  blocks[0] = f"WORKDIR, WARM, SET, STEPS = {str(tmp_path)!r}, {warm!r}, {small!r}, 2\n" + \
      blocks[0][len(FIRST):]
  scope: dict = {"__name__": "extending_guide"}
  records = []
  for i, code in enumerate(blocks):
    exec(compile(code, f"{DOC} block {i}", "exec"), scope)
    records.append(scope.get("records"))
  out = capsys.readouterr().out
  # 1. the estimator trained two steps, then one more resumed from the checkpoint of step 2
  assert re.search(r"centred: reward -?\d\.\d{3} -> -?\d\.\d{3}", out)
  from botjax import algorithms
  assert algorithms.RECIPES["centred"].advantage == "centred"
  # 2. the token reward: its spans reach S_t (a long line gets -0.2 besides the step verdicts);
  # inspect_batch showed step 1's rollouts without moving the run; the metrics log S_t
  roll, batch = scope["preview"].rollouts, scope["preview"].batch
  assert roll.local.shape == roll.tokens.shape == np.asarray(batch.advantages).shape
  long_lines = records[2]
  assert [r["step"] for r in long_lines] == [0, 1, 2]
  first = long_lines[1]
  assert first["reward_mean"] == pytest.approx(float(roll.rewards[roll.mask.any(1)].mean()))
  assert first["local/min"] == pytest.approx(float(roll.local[roll.mask].min()))
  assert first["local/max"] == pytest.approx(float(roll.local[roll.mask].max()))
  assert {"local/mean", "local/row_sum", "reward/long", "reward/math/answer"} <= set(first)
  # 3. the run's rows and parameters
  rows = scope["rows"]
  assert rows[0]["step"] == 0 and all(k.startswith("eval/") for k in rows[0] if k != "step")
  assert [r["step"] for r in rows] == [0, 1, 2, 3]
  assert scope["run"].checkpoint_steps() == [2, 3] and scope["moved"] > 0
  # 4. the hook's value, every 2 steps
  hooked = [r["step"] for r in records[4] if "param_norm" in r]
  assert hooked == [2] and np.isfinite(records[4][-1]["param_norm"])
