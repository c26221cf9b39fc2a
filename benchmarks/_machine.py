"""What every benchmark prints about the machine it ran on."""

import os
import platform


def cpu_model() -> str:
  """The CPU's model name (from /proc/cpuinfo where available)."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def describe() -> str:
  """CPU model, visible cores and load average, on one line."""
  try:
    load = "load avg %.1f" % os.getloadavg()[0]
  except OSError:
    load = "load avg n/a"
  return f"{cpu_model()}, {os.cpu_count()} cores visible, {load}"
