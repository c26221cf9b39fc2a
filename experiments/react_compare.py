r"""Pairwise VLM win rates of React policies (the paper's Fig. 2 and its win-rate table).

  python experiments/react_compare.py --runs=runs/react,runs/react-grpo \
      --pairwise_judge=http://HOST:8002/v1 --pairwise_judge_model=P --workdir=runs/compare
  python experiments/react_compare.py --runs=runs/react,runs/react-grpo --curve=head_to_head \
      --pairwise_judge=http://HOST:8002/v1 --pairwise_judge_model=P --workdir=runs/curve
  python experiments/react_compare.py --runs=runs/react,runs/react-grpo --curve=against_final \
      --pairwise_judge=http://HOST:8002/v1 --pairwise_judge_model=P --workdir=runs/curve-final

For each held-out prompt (the built-in set's 80/20 split, as in experiments/react.py) each side
renders one rollout (greedy unless --temperature), and the pairwise judge sees the request and
both screenshots in four rounds, A first in rounds 1 and 4 and B first in rounds 2 and 3 (ABBA);
the majority wins and a 2–2 split is a tie worth 0.5 to each side (BoT-GRPO, arXiv 2610.09804,
§4.1, App. D). Modes (--curve):

- none (default): the final policies of A and B (a training workdir's hf_final/, or any Hugging
  Face checkpoint directory): compare.json and compare.png.
- head_to_head: A's checkpoint k against B's checkpoint k, for step 0 (both starting policies)
  and every step k both runs saved: the win rate through training, as the paper's Fig. 2 pits
  checkpoints against each other. winrate_curve.json and winrate_curve.png.
- against_final: every checkpoint of A (and its starting policy, step 0) against B's final
  policy: how fast A approaches or passes a fixed opponent. winrate_curve.json and .png.

Both curves need training workdirs (config.json and checkpoints/); keep more checkpoints while
training with --set=checkpoint_every=N --set=keep_checkpoints=M. The pairwise judge must be given
(--pairwise_judge, --pairwise_judge_model) and differ from both runs' training judges (their
judges.json): the paper evaluates with another model to avoid judge circularity;
--allow_same_judge overrides that. Errors a user can fix exit 2 before any model is loaded.
"""

import os
import sys

from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _cli  # noqa: E402  experiments/_cli.py (this script's directory is on sys.path)
import _react  # noqa: E402  experiments/_react.py
from _cli import UserError  # noqa: E402

FLAGS = flags.FLAGS
CURVES = {"none": "final policy against final policy",
          "head_to_head": "A's checkpoint k against B's checkpoint k (the paper's Fig. 2)",
          "against_final": "each checkpoint of A against B's final policy"}
flags.DEFINE_list("runs", [], "A,B: the two sides (training workdirs, or Hugging Face checkpoint "
                  "directories for --curve=none); the win rate is A's over B.")
flags.DEFINE_enum("curve", "none", list(CURVES), "; ".join(f"{k}: {v}" for k, v in CURVES.items())
                  + ".")
flags.DEFINE_string("workdir", "runs/compare", "Output dir: compare.json / winrate_curve.json and "
                    "their figures.")
flags.DEFINE_string("prompts", "", "React prompts as for experiments/react.py (default: the "
                    "built-in set); the comparison uses its held-out split.")
flags.DEFINE_float("test_fraction", 0.2, "Held-out share of each prompt category (as in training).")
flags.DEFINE_integer("eval_limit", 0, "Use only the first N held-out prompts (0: all).")
flags.DEFINE_float("temperature", 0.0, "Sampling temperature of the rollouts (0: greedy).")
flags.DEFINE_integer("max_new_tokens", 0, "Generation budget (0: the first run's, from its "
                     "config.json, else 2048).")
flags.DEFINE_string("pairwise_judge", "", "Base URL of the pairwise VLM judge (required; a "
                    "different model from the training judges, as in the paper).")
flags.DEFINE_string("pairwise_judge_model", "", "Model name of the pairwise judge (required).")
flags.DEFINE_bool("allow_same_judge", False, "Let the pairwise judge be a training judge of a "
                  "compared run (same URL and model); the paper uses a different model to avoid "
                  "judge circularity.")
flags.DEFINE_bool("dry_run", False, "Check the flags and print what would be compared, then exit "
                  "(no judge request, no model loaded, the runs need not exist yet).")
_cli.define_offline_flag()
_cli.define_judge_flags(["pairwise_judge"], _react.prompt_keys("pairwise_judge"))

DEFAULT_MAX_NEW_TOKENS = 2048   # experiments/react.py's budget for the 3B presets


def check_pairwise_judge(url: str, model: str, training_judges, *, allow_same: bool) -> None:
  """Refuses a missing pairwise judge, or one identical to a training judge.

  The paper evaluates with a different model from the training judges to avoid judge circularity
  (BoT-GRPO, arXiv 2610.09804, §4.1): a policy trained against a judge learns that judge's taste.

  Args:
    url, model: the pairwise judge's base URL and model name.
    training_judges: (what, url, model) of each training judge known (the compared runs'
      judges.json).
    allow_same: let a training judge compare anyway.
  """
  if not url or not model:
    raise UserError("the comparison needs its own pairwise VLM judge: pass --pairwise_judge=URL "
                    "and --pairwise_judge_model=NAME (a different model from the training "
                    "judges, as in the paper)")
  pair = (_react.endpoint(url), model.strip())
  for what, t_url, t_model in training_judges:
    if t_url and t_model and (_react.endpoint(t_url), t_model.strip()) == pair and not allow_same:
      raise UserError(
          f"the pairwise judge ({url}, model {model!r}) is the training judge {what} ({t_url}, "
          f"model {t_model!r}); the paper evaluates with a different model to avoid judge "
          "circularity. Pass another --pairwise_judge / --pairwise_judge_model, or "
          "--allow_same_judge to compare with it anyway")


def final_policy(path: str) -> str:
  """The Hugging Face directory of a side's final policy: a workdir's hf_final/, or `path`."""
  from botjax.train.rundir import RunDir
  if os.path.exists(os.path.join(RunDir(path).hf_final, "config.json")):
    return RunDir(path).hf_final
  if os.path.isdir(path) and os.path.exists(os.path.join(path, "config.json")) and any(
      f.endswith(".safetensors") for f in os.listdir(path)):
    return path
  raise UserError(f"--runs side {path!r} is neither a workdir with hf_final/ (written at the end "
                  "of training) nor a Hugging Face checkpoint dir (config.json + *.safetensors)")


def run_checkpoints(path: str) -> tuple[str, list[int]]:
  """(starting HF checkpoint dir, sorted saved steps) of a training workdir, for the curves."""
  from botjax.train.rundir import RunDir, RunDirError
  run = RunDir(path)
  if not os.path.exists(run.config_path) or not run.checkpoint_steps():
    raise UserError(f"--curve={FLAGS.curve} needs training workdirs (config.json and "
                    f"checkpoints/), got {path!r}")
  try:
    base = run.base_checkpoint()
  except RunDirError as e:
    raise UserError(f"{e}; the curves restore the run's parameters into it") from None
  return base, run.checkpoint_steps()


def max_new_tokens(path: str) -> int:
  """--max_new_tokens, else the generation budget saved in the run `path`'s config.json."""
  from botjax.train.rundir import RunDir
  if FLAGS.max_new_tokens:
    return FLAGS.max_new_tokens
  run = RunDir(path)
  if os.path.exists(run.config_path):
    budget = run.read_config().get("train", {}).get("rollout", {}).get("max_new_tokens")
    if budget:
      return int(budget)
  return DEFAULT_MAX_NEW_TOKENS


def screenshots(reward, checkpoint, test, budget, plan=((None, None),)):
  """Renders one rollout per held-out prompt of `checkpoint`'s policy, for each (label, restore)
  of `plan` (restore None: the checkpoint's own weights; else a function of the model's
  parameters returning those to use): {label: screenshots}."""
  import jax
  from flax import nnx
  from botjax import models
  from botjax.sampling import Sampler, SamplingConfig
  model, tok = models.load_pretrained(checkpoint), models.load_tokenizer(checkpoint)
  sc = SamplingConfig.for_model(model.config, tok, stop_token_ids=_cli.turn_end_ids(tok),
                                max_new_tokens=budget, temperature=FLAGS.temperature)
  sampler = Sampler(model, model.config, sc)
  _, params, rest = nnx.split(model, nnx.Param, ...)
  requests = [p.prompt for p in test]
  out = {}
  for label, restore in plan:
    state = None
    if restore is not None:
      restored = restore(params)
      state = restored if len(jax.tree.leaves(rest)) == 0 else nnx.merge_state(restored, rest)
    texts = _react.rollouts(sampler, tok, [p.to_record() for p in test], jax.random.PRNGKey(0), 1,
                            params=state)
    out[label] = [s.screenshot for s in reward.score(requests, texts)]
    print(f"[react_compare] {checkpoint if label is None else label}: "
          f"{sum(x is not None for x in out[label])}/{len(test)} rendered", flush=True)
  return out


def _restorer(run: str, step: int):
  from botjax.train.rundir import load_params
  return lambda params: load_params(run, step, like=params)


def run():
  from botjax import plotting
  from botjax.rewards import react
  if len(FLAGS.runs) != 2:
    raise UserError(f"--runs needs two comma-separated paths A,B, got {FLAGS.runs}")
  a, b = FLAGS.runs
  check_pairwise_judge(FLAGS.pairwise_judge, FLAGS.pairwise_judge_model,
                       _react.saved_judges(a) + _react.saved_judges(b),
                       allow_same=FLAGS.allow_same_judge)
  prompts = _cli.judge_prompts(FLAGS.judge_prompt, _react.prompt_keys("pairwise_judge"))
  if FLAGS.dry_run:
    print(f"[react_compare] would compare {a} (A) with {b} (B), --curve={FLAGS.curve}: "
          f"{CURVES[FLAGS.curve]}; pairwise judge {FLAGS.pairwise_judge_model} at "
          f"{FLAGS.pairwise_judge} ({FLAGS.pairwise_judge_api}); output in {FLAGS.workdir}")
    return

  def judge():
    return _react.make_judge("pairwise_judge", url=FLAGS.pairwise_judge,
                             model=FLAGS.pairwise_judge_model, api=FLAGS.pairwise_judge_api,
                             prompts=prompts)
  _react.check_reachable("pairwise_judge", FLAGS.pairwise_judge, judge())
  _react.check_toolchain()
  if FLAGS.offline:
    os.environ["HF_HUB_OFFLINE"] = "1"
  if FLAGS.curve == "none":
    sides = final_policy(a), final_policy(b)
  else:
    base_a, steps_a = run_checkpoints(a)
    if FLAGS.curve == "head_to_head":
      base_b, steps_b = run_checkpoints(b)
    else:
      base_b, steps_b = final_policy(b), []
    plan = _react.curve_plan(FLAGS.curve, steps_a, steps_b)
  _, test = _react.held_out_prompts(FLAGS.prompts, FLAGS.test_fraction, FLAGS.eval_limit)
  if not test:
    raise UserError("no held-out prompts (more prompts, or another --test_fraction)")
  requests = [p.prompt for p in test]
  budget = max_new_tokens(a)
  pairwise = judge()
  out_dir = FLAGS.workdir
  os.makedirs(out_dir, exist_ok=True)
  reward = _react.make_reward()        # renders only: no training judges
  try:
    if FLAGS.curve == "none":
      shots_a = screenshots(reward, sides[0], test, budget)[None]
      shots_b = screenshots(reward, sides[1], test, budget)[None]
    else:
      restore = lambda run, k: None if k == 0 else _restorer(run, k)  # noqa: E731
      shots_a = screenshots(reward, base_a, test, budget,
                            [(ka, restore(a, ka)) for ka, _ in plan])
      if FLAGS.curve == "head_to_head":
        shots_b = screenshots(reward, base_b, test, budget,
                              [(kb, restore(b, kb)) for _, kb in plan])
      else:
        final_b = screenshots(reward, base_b, test, budget)[None]
  finally:
    reward.close()
  try:
    if FLAGS.curve == "none":
      result = react.pairwise_win_rate(pairwise, requests, shots_a, shots_b)
      result.update(a=a, b=b, prompts=[p.id for p in test],
                    pairwise_judge_model=FLAGS.pairwise_judge_model)
      react.save_json(result, os.path.join(out_dir, "compare.json"))
      label = f"{os.path.basename(os.path.normpath(a))} vs {os.path.basename(os.path.normpath(b))}"
      plotting.plot_win_rates({label: result}, os.path.join(out_dir, "compare.png"))
      print(f"[react_compare] win rate of A over B: {result['win_rate']:.3f} (ties "
            f"{result['tie_rate']:.3f}, {result['wins']}-{result['losses']}-{result['ties']} of "
            f"{result['n']}); wrote {os.path.join(out_dir, 'compare.json')}", flush=True)
      return
    points = []
    for ka, kb in plan:
      result = react.pairwise_win_rate(pairwise, requests, shots_a[ka],
                                       final_b if kb is None else shots_b[kb])
      points.append({"step": ka, "baseline_step": kb, **result})
      print(f"[react_compare] step {ka}: win rate {result['win_rate']:.3f} (ties "
            f"{result['tie_rate']:.3f}) over {b}" + ("" if kb is None else f" at step {kb}"),
            flush=True)
  finally:
    pairwise.close()
  curve = {"mode": FLAGS.curve, "description": CURVES[FLAGS.curve], "run": a, "baseline": b,
           "prompts": [p.id for p in test], "pairwise_judge_model": FLAGS.pairwise_judge_model,
           "points": points}
  react.save_json(curve, os.path.join(out_dir, "winrate_curve.json"))
  name = lambda p: os.path.basename(os.path.normpath(p))  # noqa: E731
  title = (f"Win rate of {name(a)} over {name(b)}, checkpoint k against checkpoint k"
           if FLAGS.curve == "head_to_head" else
           f"Win rate of {name(a)}'s checkpoints over {name(b)}'s final policy")
  plotting.plot_win_rate_curve({name(a): [(p["step"], p["win_rate"], p["tie_rate"])
                                          for p in points]},
                               os.path.join(out_dir, "winrate_curve.png"), title=title)
  print(f"[react_compare] wrote {os.path.join(out_dir, 'winrate_curve.json')} ({len(points)} "
        "points)", flush=True)


if __name__ == "__main__":
  _cli.entry(__doc__, run)
