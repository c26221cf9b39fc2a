"""How long the survivors of a 2-process loopback cluster take to stop when a process is lost,
and how: `python tests/multiprocess/_measure.py [repeats] [heartbeat_s]`.

Scenarios (each `repeats` times): process 1 killed (SIGKILL) mid-collective, process 0 killed
mid-collective, process 1 killed inside an orbax save (before the commit barrier), each with
botjax's watchdog and with JAX's own detection alone. Prints one line per run: the scenario,
the survivor's exit status, its seconds from the kill to its exit, and the first line of its
message.
"""
import os
import sys
import tempfile
import time

sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                os.path.dirname(os.path.abspath(__file__))]

from _cluster import Cluster  # noqa: E402

WORKERS = "tests/multiprocess/_workers.py"


def _message(stderr: str) -> str:
  for key in ("[botjax] process", "Terminating process", "Gloo"):
    for line in stderr.splitlines():
      if key in line:
        return line[line.index(key):][:160]
  return stderr.strip().splitlines()[-1][:160] if stderr.strip() else ""


def run(name: str, victim: int, args: list[str], ready: str, heartbeat_s: int,
        watchdog: bool) -> None:
  env = {"BOTJAX_TEST_HEARTBEAT_S": str(heartbeat_s),
         "BOTJAX_TEST_WATCHDOG": "1" if watchdog else "0"}
  with Cluster(script=WORKERS, args=args, env=env, timeout=heartbeat_s * 3 + 120) as c:
    c.wait_for(victim, ready)
    if ready == "looping":
      c.wait_for(1 - victim, ready)
    time.sleep(0.5)
    c.kill(victim)
    t = time.monotonic() - c._t0
    results = c.wait()
  s = results[1 - victim]
  how = "killed by the helper (hung)" if s.ended_by_helper else f"exit {s.returncode}"
  print(f"{name:40s} watchdog={'on ' if watchdog else 'off'} survivor {1 - victim}: {how:8s} "
        f"after {s.seconds - t:5.1f} s | {_message(s.stderr)}", flush=True)


def main() -> None:
  repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 2
  heartbeat_s = int(sys.argv[2]) if len(sys.argv) > 2 else 20
  print(f"heartbeat_timeout_s={heartbeat_s}; {os.cpu_count()} CPUs; load average "
        f"{os.getloadavg()[0]:.1f}", flush=True)
  for watchdog in (True, False):
    for _ in range(repeats):
      run("process 1 killed mid-collective", 1, ["lose_a_process"], "looping", heartbeat_s,
          watchdog)
      run("process 0 killed mid-collective", 0, ["lose_a_process"], "looping", heartbeat_s,
          watchdog)
      with tempfile.TemporaryDirectory() as d:
        run("process 1 killed inside an orbax save", 1, ["save_killed_midway", d],
            "step 2 written, not committed", heartbeat_s, watchdog)


if __name__ == "__main__":
  main()
