"""Wiring shared by experiments/react.py (training, compile rate) and experiments/react_compare.py
(pairwise win rates): the judges and their prompt files, the toolchain check, the React reward,
rollouts as text, and the record of a run's training judges. Every helper takes values, not
flags. Imports of botjax stay inside the functions so that `--help` answers without loading JAX.
"""

import json
import os
import urllib.parse

from _cli import UserError, user as _user

# --judge_prompt=KEY=FILE: KEY -> (the judge flag, the judge's argument, what the prompt is)
JUDGE_PROMPTS = {
    "code": ("judge", "prompt", "the code judge's template ({prompt}, {code})"),
    "code_system": ("judge", "system_prompt", "its system prompt"),
    "vlm": ("vlm_judge", "prompt", "the VLM judge's template ({prompt})"),
    "vlm_one_turn": ("vlm_judge", "one_turn_prompt", "--vlm_mode=one_turn's ({prompt}, {code})"),
    "vlm_second_turn": ("vlm_judge", "second_turn_prompt", "two_turn's second ({code}; optional "
                        "{prompt}, {score}, {justification})"),
    "vlm_system": ("vlm_judge", "system_prompt", "the VLM judge's system prompt"),
    "pairwise": ("pairwise_judge", "prompt", "the pairwise judge's template ({prompt})"),
    "pairwise_system": ("pairwise_judge", "system_prompt", "its system prompt"),
}

JUDGES_FILE = "judges.json"   # a run's training judges, for react_compare's circularity check

# --judges of react.py: which judges a training run uses. "all" is the paper's React reward
# (§4.1: compile/render, ESLint, the LLM code judge and the VLM screenshot judge); the others are
# named deviations.
JUDGE_MODES = {
    "all": "compile/render + ESLint + LLM code judge + VLM screenshot judge (the paper's §4.1 "
           "reward)",
    "code": "compile/render + ESLint + LLM code judge, no VLM judge (deviation: the paper's "
            "minimal recipe, not its main run)",
    "off": "compile/render + ESLint only, no judges (deviation: the paper found this reward "
           "hackable, compiling pages that render nothing, §4.4)",
}


def prompt_keys(what: str | None = None) -> dict:
  """{KEY: what the prompt is} of `JUDGE_PROMPTS`, only those of the judge `what` if given."""
  return {k: v[2] for k, v in JUDGE_PROMPTS.items() if what is None or v[0] == what}


def judge_modes_check(mode: str, *, judge: str, vlm_judge: str) -> str:
  """The reward line of `--judges=mode` given the --judge / --vlm_judge URLs ("" for none);
  UserError when the URLs do not match the mode."""
  if mode not in JUDGE_MODES:
    raise UserError(f"--judges={mode!r}: valid: {', '.join(JUDGE_MODES)}")
  need = {"all": ("judge", "vlm_judge"), "code": ("judge",), "off": ()}[mode]
  given = {"judge": judge, "vlm_judge": vlm_judge}
  missing = [w for w in need if not given[w]]
  extra = [w for w in given if given[w] and w not in need]
  if missing:
    raise UserError(
        f"--judges={mode} ({JUDGE_MODES[mode]}) needs "
        + " and ".join(f"--{w}=URL --{w}_model=NAME" for w in missing)
        + "; or pass --judges=code (no VLM judge) or --judges=off (no judges), both deviations "
          "from the paper's React reward")
  if extra:
    raise UserError(f"--judges={mode} leaves out " + " and ".join(f"--{w}" for w in extra)
                    + f", which was given; drop it, or pass --judges=all")
  return JUDGE_MODES[mode]


def make_judge(what: str, *, url: str, model: str, api: str, prompts: dict,
               vlm_mode: str = "screenshot"):
  """The judge of --<what> ("judge": CodeJudge, "vlm_judge": VLMJudge, "pairwise_judge":
  PairwiseJudge) at `url` serving `model` through `api` ("openai" or "anthropic"), with the
  --judge_prompt files `prompts` ({KEY: path}) that belong to it; a bad URL, a missing key or a
  bad prompt is a UserError."""
  from botjax.rewards import react
  kwargs = {arg: prompts[key] for key, (judge, arg, _) in JUDGE_PROMPTS.items()
            if judge == what and key in prompts}
  if what == "vlm_judge":
    kwargs["mode"] = vlm_mode
  cls = {"judge": react.CodeJudge, "vlm_judge": react.VLMJudge,
         "pairwise_judge": react.PairwiseJudge}[what]
  try:
    return cls(react.JudgeConfig(api=api, model=model, base_url=url), **kwargs)
  except (ValueError, FileNotFoundError) as e:
    raise UserError(f"--{what}={url}: {e}") from None


def check_reachable(what: str, url: str, judge) -> None:
  """Fails fast unless `judge` (of --<what>=url) answers one short request through its API;
  closes it either way."""
  from botjax.rewards import llm
  try:
    judge.client.check_reachable()
  except llm.Unreachable as e:
    raise UserError(f"--{what}={url} is unreachable: {e}\n(start the server, "
                    f"e.g. `vllm serve MODEL --port 8000`, check --{what}_api and --{what}_model, "
                    "or drop the flag)") from None
  finally:
    judge.close()


def check_toolchain() -> None:
  """The React toolchain (Node packages, Chromium, Playwright), checked before any expensive
  work (the tiny warm start, loading weights)."""
  from botjax.rewards import react
  try:
    react.check_toolchain(render=True)
  except react.ToolchainError as e:
    raise UserError(f"{e}\nInstall it with `bash scripts/setup.sh test` (Node packages pinned in "
                    "botjax/rewards/react/node, Debian's chromium).") from None


def make_reward(*, code_judge=None, vlm_judge=None, vlm_line_weight: float = 0.0,
                typecheck: bool = False, blank_is_failure: bool = False):
  """The ReactReward with these judges (None: that term is left out) and settings."""
  from botjax.rewards import react
  cfg = _user(lambda: react.ReactRewardConfig(vlm_line_weight=vlm_line_weight,
                                              typecheck=typecheck,
                                              blank_is_failure=blank_is_failure))
  return react.ReactReward(cfg, code_judge=code_judge, vlm_judge=vlm_judge)


def held_out_prompts(source: str, test_fraction: float, limit: int = 0):
  """(train, test) ReactPrompts of `source` ("" for the built-in set) split by
  `react.split_prompts`; `limit` > 0 keeps the first `limit` test prompts."""
  from botjax.rewards import react
  prompts = _user(lambda: react.load_prompts(source or None))
  train, test = _user(lambda: react.split_prompts(prompts, test_fraction=test_fraction))
  return train, (test[:limit] if limit else test)


def rollouts(sampler, tokenizer, records, key, n, params=None):
  """n completions per record ({"prompt": request, ...}), as texts (rows of a record adjacent)."""
  from botjax.rewards import react
  from botjax.sampling import generate_text
  out = generate_text(sampler, tokenizer, [react.chat_messages(r["prompt"]) for r in records],
                      key, n=n, params=params)
  return list(out.completions)


def save_judges(workdir: str, judges: dict) -> None:
  """Writes a run's training judges ({what: {"url", "model"}}) to <workdir>/judges.json."""
  from botjax.rewards import react
  react.save_json(judges, os.path.join(workdir, JUDGES_FILE))


def saved_judges(path: str) -> list[tuple[str, str, str]]:
  """(what, url, model) of each training judge saved in the run directory `path` (none for a
  Hugging Face checkpoint directory)."""
  saved = os.path.join(path, JUDGES_FILE)
  if not os.path.exists(saved):
    return []
  with open(saved) as f:
    return [(f"{what} of {path}", j.get("url"), j.get("model")) for what, j in json.load(f).items()]


def endpoint(url: str) -> tuple[str, str, int, str]:
  """(scheme, host, port, path) of an endpoint URL, normalised so that spellings of the same
  endpoint compare equal (case of scheme and host, default port, trailing slash)."""
  parts = urllib.parse.urlparse(url.strip())
  scheme = parts.scheme.lower()
  host = (parts.hostname or "").lower()
  host = "127.0.0.1" if host in ("localhost", "::1", "0.0.0.0") else host
  port = parts.port or (443 if scheme == "https" else 80)
  return scheme, host, port, parts.path.rstrip("/")


def curve_plan(mode: str, steps_a, steps_b) -> list[tuple[int, int | None]]:
  """(step of A, step of B or None for B's final policy) pairs of a curve: head_to_head pairs
  step 0 and every step both runs saved; against_final pairs step 0 and every step A saved with
  B's final policy."""
  if mode == "head_to_head":
    common = sorted(set(steps_a) & set(steps_b) - {0})
    if not common:
      raise UserError(f"--curve=head_to_head: the runs saved no common step (A: {list(steps_a)}, "
                      f"B: {list(steps_b)}); train both with the same --set=checkpoint_every=N "
                      "--set=keep_checkpoints=M")
    return [(0, 0)] + [(k, k) for k in common]
  return [(0, None)] + [(k, None) for k in sorted(steps_a) if k]
