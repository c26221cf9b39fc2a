"""botjax.plotting (loading runs, seed grouping, threshold crossings, figures) and the CLI of
experiments/plot.py that wires it."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from botjax import plotting as plot
from botjax.train.rundir import MetricsWriter
from _util import imported, run_script_cases

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "experiments", "plot.py")


# Exact binary fractions, so the seed means below are exact.
ACC = {
    "grpo-seed0": [0.125, 0.25, 0.375, 0.5],
    "grpo-seed1": [0.125, 0.375, 0.5, 0.5],
    "bot_grpo-seed0": [0.125, 0.5, 0.5, 0.625],
}
STEPS = [0, 10, 20, 30]


def _write_run(root, name, acc, *, passk=False):
  w = MetricsWriter(str(root / name), tensorboard=False)
  for step, a in zip(STEPS, acc):
    extra = {"eval/accuracy": a}
    if passk:
      extra.update({"eval/pass@1": a, "eval/pass@2": min(1.0, 1.5 * a), "eval/pass@4": min(1.0, 2 * a)})
    w.write(step, {"reward_mean": 2 * a, "loss": 0.5}, **extra)
  w.close()
  return str(root / name)


@pytest.fixture
def run_dirs(tmp_path):
  return [_write_run(tmp_path, name, acc, passk=True) for name, acc in ACC.items()]


def _check_png(path, min_w=400, min_h=250):
  with Image.open(path) as img:
    img.verify()
  with Image.open(path) as img:
    w, h = img.size
    pixels = np.asarray(img.convert("RGB"), dtype=float)
  assert w >= min_w and h >= min_h
  # Not a blank canvas: many distinct colours and real contrast.
  assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20
  assert pixels.std() > 10


def test_run_name_strips_seed_suffix(tmp_path):
  assert plot.run_name("runs/q/grpo-seed12") == "grpo"
  assert plot.run_name("runs/q/grpo-seed0/") == "grpo"
  assert plot.run_name("runs/q/bot_grpo") == "bot_grpo"
  assert plot.run_name("runs/q/seedless-seedling") == "seedless-seedling"
  (tmp_path / "aime").mkdir()
  (tmp_path / "aime" / "eval.json").write_text("{}")
  assert plot.run_name(str(tmp_path / "aime" / "eval.json")) == "aime"


def test_seeds_are_grouped_and_averaged(run_dirs):
  runs = plot.load_runs(run_dirs)
  assert list(runs) == ["grpo", "bot_grpo"]
  assert [len(s) for s in runs.values()] == [2, 1]
  steps, mean, lo, hi = plot.mean_curve(runs["grpo"], "eval/accuracy")
  np.testing.assert_array_equal(steps, STEPS)
  np.testing.assert_allclose(mean, [0.125, 0.3125, 0.4375, 0.5])
  np.testing.assert_allclose(lo, [0.125, 0.25, 0.375, 0.5])
  np.testing.assert_allclose(hi, [0.125, 0.375, 0.5, 0.5])
  _, mean, lo, hi = plot.mean_curve(runs["grpo"], "eval/accuracy", band="std")
  np.testing.assert_allclose(hi - mean, [0.0, 0.0625, 0.0625, 0.0])   # population std of 2 seeds
  np.testing.assert_allclose(mean - lo, hi - mean)


def test_threshold_crossings_match_hand_computation(run_dirs):
  runs = plot.load_runs(run_dirs)
  c = plot.threshold_crossings(runs, "eval/accuracy", [0.3, 0.45, 0.6])
  # grpo mean 0.125, 0.3125, 0.4375, 0.5: >= 0.3 first at step 10, >= 0.45 at 30, never 0.6.
  assert c["grpo"][0.3] == {"mean": 10, "seeds": [20, 10]}
  assert c["grpo"][0.45] == {"mean": 30, "seeds": [30, 20]}
  assert c["grpo"][0.6] == {"mean": None, "seeds": [None, None]}
  # bot_grpo 0.125, 0.5, 0.5, 0.625.
  assert c["bot_grpo"][0.3]["mean"] == 10 and c["bot_grpo"][0.45]["mean"] == 10
  assert c["bot_grpo"][0.6] == {"mean": 30, "seeds": [30]}


def test_figure_marks_crossings(run_dirs):
  plt = plot._pyplot()
  runs = plot.load_runs(run_dirs)
  fig, ax = plt.subplots()
  plot.draw_metric(ax, runs, "eval/accuracy", thresholds=[0.3, 0.45])
  vertical = sorted(float(line.get_xdata()[0]) for line in ax.lines
                    if len(set(np.asarray(line.get_xdata(), float))) == 1
                    and len(set(np.asarray(line.get_ydata(), float))) > 1)
  horizontal = sorted(float(line.get_ydata()[0]) for line in ax.lines
                      if len(set(np.asarray(line.get_ydata(), float))) == 1
                      and len(set(np.asarray(line.get_xdata(), float))) > 1)
  plt.close(fig)
  assert vertical == [10.0, 10.0, 10.0, 30.0]   # grpo 0.3@10, 0.45@30; bot_grpo both @10
  assert horizontal == [0.3, 0.45]
  assert len(ax.collections) == 1                # one band: grpo has two seeds, bot_grpo one


def test_plot_metric_writes_a_png(run_dirs, tmp_path):
  out = plot.plot_metric(plot.load_runs(run_dirs), "eval/accuracy", str(tmp_path / "acc.png"),
                         thresholds=[0.3], title="accuracy")
  _check_png(out)


def test_resumed_run_keeps_the_later_record_per_step(tmp_path):
  d = tmp_path / "grpo-seed0"
  w = MetricsWriter(str(d), tensorboard=False)
  for step, a in [(0, 0.1), (10, 0.2), (20, 0.9), (10, 0.3), (20, 0.4)]:   # resumed from step 0
    w.write(step, {"eval/accuracy": a})
  w.close()
  recs = plot.load_records(str(d))
  assert [(r["step"], r["eval/accuracy"]) for r in recs] == [(0, 0.1), (10, 0.3), (20, 0.4)]


def test_eval_json_feeds_passk(tmp_path):
  d = tmp_path / "aime"
  d.mkdir()
  history = [{"step": s, "pass@1": p, "pass@2": min(1.0, 2 * p), "pass@4": min(1.0, 3 * p),
              "accuracy": p} for s, p in [(0, 0.125), (10, 0.25), (20, 0.375)]]
  (d / "eval.json").write_text(json.dumps({"latest": history[-1], "history": history}))
  runs = plot.load_runs([str(d)])
  assert plot.passk_keys(runs) == [1, 2, 4]
  steps, mean, _, _ = plot.mean_curve(runs["aime"], "eval/pass@2")
  np.testing.assert_array_equal(steps, [0, 10, 20])
  np.testing.assert_allclose(mean, [0.25, 0.5, 0.75])
  _check_png(plot.plot_passk(runs, str(tmp_path / "passk.png")), min_w=800)
  with pytest.raises(plot.PlotError, match="pass@8 is not logged; logged: pass@1, pass@2, pass@4"):
    plot.plot_passk(runs, str(tmp_path / "x.png"), ks=[8])


def test_win_rates_pool_seeds_and_plot(tmp_path):
  (tmp_path / "vs_grpo-seed0.json").write_text(json.dumps(
      {"win_rate": 0.625, "tie_rate": 0.25, "wins": 2, "losses": 1, "ties": 1, "n": 4,
       "outcomes": [1.0, 1.0, 0.0, 0.5]}))
  (tmp_path / "vs_grpo-seed1.json").write_text(json.dumps(
      {"win_rate": 0.5, "tie_rate": 0.5, "wins": 1, "losses": 1, "ties": 2, "n": 4}))
  (tmp_path / "more.json").write_text(json.dumps(
      {"vs SFT": {"win_rate": 0.75, "tie_rate": 0.0, "wins": 3, "losses": 1, "ties": 0, "n": 4}}))
  res = plot.load_win_rates([str(tmp_path)])
  # Pooled: 3 wins, 3 ties, 2 losses of 8 -> (3 + 1.5) / 8.
  assert res["vs_grpo"] == {"win_rate": 4.5 / 8, "tie_rate": 3 / 8, "wins": 3, "ties": 3,
                            "losses": 2, "n": 8}
  assert res["vs SFT"]["win_rate"] == 0.75
  _check_png(plot.plot_win_rates(res, str(tmp_path / "wr.png")), min_w=300)
  (tmp_path / "bad.json").write_text(json.dumps({"accuracy": 0.5}))
  with pytest.raises(plot.PlotError, match="bad.json is not a win-rate result"):
    plot.load_win_rates([str(tmp_path / "bad.json")])


def test_react_compare_dirs_are_labelled_a_vs_b_and_pooled(tmp_path):
  for seed, (w, l, t) in enumerate([(3, 1, 0), (1, 1, 2)]):
    d = tmp_path / f"cmp-seed{seed}"
    d.mkdir()
    n = w + l + t
    (d / "compare.json").write_text(json.dumps(   # as experiments/react_compare.py writes it
        {"win_rate": (w + 0.5 * t) / n, "tie_rate": t / n, "wins": w, "losses": l, "ties": t,
         "n": n, "a": f"runs/react/bot_grpo-seed{seed}/hf_final", "b": f"runs/react/grpo-seed{seed}"}))
    (d / "config.json").write_text(json.dumps({"train": {}}))   # other JSON of the dir: skipped
  res = plot.load_win_rates([str(tmp_path / "cmp-seed0"), str(tmp_path / "cmp-seed1")])
  assert list(res) == ["bot_grpo vs grpo"]
  assert res["bot_grpo vs grpo"] == {"win_rate": 5 / 8, "tie_rate": 2 / 8, "wins": 4, "ties": 2,
                                     "losses": 2, "n": 8}
  (tmp_path / "other").mkdir()
  (tmp_path / "other" / "config.json").write_text("{}")
  with pytest.raises(plot.PlotError, match=r"holds no win-rate JSON \(looked at: config.json\)"):
    plot.load_win_rates([str(tmp_path / "other")])


def test_react_eval_json_gives_compile_rate(tmp_path):
  d = tmp_path / "bot_grpo"
  d.mkdir()
  history = [{"step": 0, "compile_rate": 0.5, "n": 8, "failures": {}},
             {"step": 10, "compile_rate": 0.875, "n": 8, "failures": {}}]
  (d / "eval.json").write_text(json.dumps({"latest": history[-1], "history": history}))
  runs = plot.load_runs([str(d)])
  assert "eval/compile_rate" in plot.available_metrics(runs)
  c = plot.threshold_crossings(runs, "eval/compile_rate", [0.8])
  assert c["bot_grpo"][0.8] == {"mean": 10, "seeds": [10]}


def test_bad_input_raises(run_dirs, tmp_path):
  with pytest.raises(plot.PlotError, match="no such run directory or file: .*nope"):
    plot.load_runs([str(tmp_path / "nope")])
  (tmp_path / "empty").mkdir()
  with pytest.raises(plot.PlotError, match="neither metrics.jsonl nor eval.json"):
    plot.load_runs([str(tmp_path / "empty")])
  runs = plot.load_runs(run_dirs)
  with pytest.raises(plot.PlotError, match=r"no run logs metric 'eval/acc'; metrics present: "
                                           r"eval/accuracy, eval/pass@1"):
    plot.plot_metric(runs, "eval/acc", str(tmp_path / "x.png"))
  with pytest.raises(plot.PlotError, match="band must be"):
    plot.mean_curve(runs["grpo"], "eval/accuracy", band="iqr")
  assert not (tmp_path / "x.png").exists()


def test_cli_metric_passk_and_winrate(run_dirs, tmp_path):
  wr = tmp_path / "vs_grpo.json"
  wr.write_text(json.dumps({"win_rate": 0.5, "tie_rate": 0.5, "wins": 1, "losses": 1, "ties": 2,
                            "n": 4}))
  runs = f"--runs={','.join(run_dirs)}"
  metric, passk, winrate = run_script_cases(SCRIPT, [
      [runs, "--metric=eval/accuracy", "--thresholds=0.3,0.45", f"--out={tmp_path / 'fig.png'}",
       "--band=std"],
      [runs, "--kind=passk", "--ks=1,4", f"--out={tmp_path / 'passk.png'}"],
      [f"--runs={wr}", "--kind=winrate", f"--out={tmp_path / 'wr.png'}"]],
      timeout=120, env={"MPLBACKEND": "Agg"})
  assert metric.returncode == 0, metric.stderr[-2000:]
  _check_png(tmp_path / "fig.png")
  assert "| grpo | 2 |" in metric.stdout and "| bot_grpo | 1 |" in metric.stdout
  assert "grpo: mean eval/accuracy first >= 0.3 at step 10 (per seed: [20, 10])" in metric.stdout
  assert passk.returncode == 0, passk.stderr[-2000:]
  _check_png(tmp_path / "passk.png", min_w=700)
  assert "pass@1:" in passk.stdout and "pass@4:" in passk.stdout and "pass@2:" not in passk.stdout
  assert winrate.returncode == 0, winrate.stderr[-2000:]
  _check_png(tmp_path / "wr.png", min_w=300)
  assert "vs_grpo: win rate 0.500, tie rate 0.500" in winrate.stdout


def test_cli_errors_exit_2(run_dirs, tmp_path):
  out = f"--out={tmp_path / 'a.png'}"
  missing, metric, thresholds, ks = run_script_cases(SCRIPT, [
      [f"--runs={tmp_path / 'missing'}", out],
      [f"--runs={run_dirs[0]}", "--metric=eval/compile_rate", out],
      [f"--runs={run_dirs[0]}", "--thresholds=0.3,high", out],
      [f"--runs={run_dirs[0]}", "--kind=passk", "--ks=8", out]], env={"MPLBACKEND": "Agg"})
  assert missing.returncode == 2 and "no such run directory or file" in missing.stderr
  assert "missing" in missing.stderr and "Traceback" not in missing.stderr
  assert metric.returncode == 2 and "'eval/compile_rate'" in metric.stderr
  assert "metrics present: eval/accuracy" in metric.stderr and "reward_mean" in metric.stderr
  assert thresholds.returncode == 2 and "--thresholds: 'high' is not a float" in thresholds.stderr
  assert ks.returncode == 2 and "pass@8 is not logged" in ks.stderr
  assert not (tmp_path / "a.png").exists()


def test_plot_runs_draws_one_panel_per_key(run_dirs, tmp_path):
  runs = plot.load_runs(run_dirs)
  out = plot.plot_runs(runs, str(tmp_path / "runs.png"), title="t", thresholds=[0.3])
  _check_png(out, min_w=1000)     # two panels of 5.5 inches at 120 dpi
  # a key no run logs leaves its panel empty instead of failing
  out = plot.plot_runs(runs, str(tmp_path / "one.png"), keys=(("eval/nothing", "x"),))
  with Image.open(out) as img:
    assert img.size[0] >= 600


def test_plot_compile_rate_draws_the_runs(tmp_path):
  runs = {"bot_grpo": [(50, 0.85), (0, 0.2), (100, 0.9)], "grpo": [(0, 0.2), (100, 0.6)]}
  _check_png(plot.plot_compile_rate(runs, str(tmp_path / "fig1.png")))
  _check_png(plot.plot_compile_rate(runs, str(tmp_path / "fig1b.png"), threshold=None))


def test_plotting_imports_neither_matplotlib_nor_jax():
  assert imported(["botjax", "botjax.plotting"], ["matplotlib", "jax", "flax"]) == []


def _rolling_loop(v, w):
  return np.array([np.mean(v[max(0, i - w + 1):i + 1]) for i in range(len(v))])


def test_rolling_mean_equals_a_numpy_trailing_mean():
  v = np.random.default_rng(0).normal(size=37)
  for w in (1, 3, 10, 50):
    np.testing.assert_allclose(plot.rolling_mean(v, w), _rolling_loop(v, w))
  # past the first window it is the plain moving average np.convolve gives
  np.testing.assert_allclose(plot.rolling_mean(v, 10)[9:], np.convolve(v, np.ones(10) / 10, "valid"))
  with pytest.raises(plot.PlotError, match="positive integer, got 0"):
    plot.rolling_mean(v, 0)


def test_mean_curve_smooths_each_seed_and_gives_a_standard_error_band():
  rng = np.random.default_rng(1)
  vals = rng.normal(size=(3, 30))
  seeds = [[{"step": s, "reward_mean": float(x)} for s, x in enumerate(row)] for row in vals]
  _, mean, lo, hi = plot.mean_curve(seeds, "reward_mean", band="se", smooth=10)
  sm = np.stack([_rolling_loop(row, 10) for row in vals])
  np.testing.assert_allclose(mean, sm.mean(0))
  np.testing.assert_allclose(hi - mean, sm.std(0, ddof=1) / np.sqrt(3))
  np.testing.assert_allclose(mean - lo, hi - mean)


def test_many_recipes_split_into_family_panels_with_smoothed_rewards(tmp_path):
  rng = np.random.default_rng(2)
  names = ["grpo", "bot_grpo", "dapo", "gspo", "grpo_stepmean", "process_grpo", "rloo", "mystery"]
  runs = {n: [[{"step": s, "reward_mean": float(rng.normal()),
                **({"eval/accuracy": 0.1 * s / 10} if s % 10 == 0 else {})} for s in range(41)]
              for _ in range(2)] for n in names}
  fig, axes = plot.runs_figure(runs, title="cmp", band="se", smooth=10)
  assert axes.shape == (3, 2)
  assert [ax.get_title() for ax in axes[:, 0]] == ["step-reading recipes", "sequence-only recipes",
                                                   "other recipes"]
  legend = lambda ax: [t.get_text() for t in ax.get_legend().get_texts()]
  assert legend(axes[0, 1]) == ["bot_grpo (2 seeds)", "grpo_stepmean (2 seeds)",
                                "process_grpo (2 seeds)"]
  assert legend(axes[1, 0]) == ["grpo (2 seeds)", "dapo (2 seeds)", "gspo (2 seeds)",
                                "rloo (2 seeds)"]
  assert "rolling mean over 10 steps" in axes[0, 1].get_ylabel()
  assert "rolling mean" not in axes[0, 0].get_ylabel()           # held-out accuracy as logged
  assert "standard error" in fig._suptitle.get_text()
  # the drawn reward line of bot_grpo is the seed mean of the NumPy rolling means
  line = axes[0, 1].get_lines()[0]
  want = np.mean([_rolling_loop([r["reward_mean"] for r in recs], 10) for recs in runs["bot_grpo"]], 0)
  np.testing.assert_allclose(line.get_ydata(), want)
  np.testing.assert_allclose(axes[0, 0].get_lines()[0].get_xdata(), [0, 10, 20, 30, 40])
  plot._pyplot().close(fig)
  out = plot.plot_runs(runs, str(tmp_path / "all.png"), title="cmp", band="se")
  _check_png(out, min_w=1000, min_h=1200)
  # Labelled runs (the quick-start's "recipe (lr ...)") group as their recipe. Thresholds are
  # marked (a crossing step annotated per run) only on panels of at most max_per_panel runs.
  labelled = {f"{n} (lr 0.0001)": v for n, v in runs.items()}
  fig, axes = plot.runs_figure(labelled, band="se", thresholds=[0.2])
  assert [len(axes[r, 0].texts) for r in range(3)] == [3, 4, 1]
  plot._pyplot().close(fig)
  # Up to 20 runs each get a colour of their own.
  many = {f"r{i}": runs["grpo"] for i in range(20)}
  fig, axes = plot.runs_figure(many, families={"": list(many)})
  from matplotlib.colors import to_hex
  assert len({to_hex(line.get_color()) for line in axes[0, 0].get_lines()}) == 20
  plot._pyplot().close(fig)
  fig, axes = plot.runs_figure(labelled, band="se", thresholds=[0.2], max_per_panel=3)
  assert [len(axes[r, 0].texts) for r in range(3)] == [3, 0, 1]   # 4 runs crowd the second
  assert [ax.get_title() for ax in axes[:, 0]] == ["step-reading recipes", "sequence-only recipes",
                                                   "other recipes"]
  assert legend(axes[2, 0]) == ["mystery (lr 0.0001) (2 seeds)"]
  plot._pyplot().close(fig)
  # up to five recipes stay in one row
  few = {n: runs[n] for n in names[:3]}
  fig, axes = plot.runs_figure(few)
  assert axes.shape == (1, 2)
  plot._pyplot().close(fig)
