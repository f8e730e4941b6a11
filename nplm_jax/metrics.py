"""Metrics to TensorBoard event files and a JSON-lines log, and progress with rate and ETA."""

import json
import os
import time


class MetricWriter:
  def __init__(self, workdir: str):
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    self._tb = SummaryWriter(os.path.join(workdir, 'tensorboard'))
    self._jsonl = open(os.path.join(workdir, 'metrics.jsonl'), 'a', encoding='utf-8')

  def write(self, step: int, metrics: dict) -> None:
    for k, v in metrics.items():
      self._tb.add_scalar(k, v, step)
    self._jsonl.write(json.dumps({'step': step, **metrics}) + '\n')
    self._jsonl.flush()

  def close(self) -> None:
    self._tb.close()
    self._jsonl.close()


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}h{m:02d}m{s:02d}s' if h else f'{m}m{s:02d}s'


class Progress:
  """Steps/s and tokens/s since the last report, and the time left to `total_steps`."""

  def __init__(self, start_step: int, total_steps: int, tokens_per_step: int):
    self._total = total_steps
    self._tokens_per_step = tokens_per_step
    self._last_step, self._last_time = start_step, time.perf_counter()

  def report(self, step: int) -> dict:
    now = time.perf_counter()
    steps_per_sec = (step - self._last_step) / max(now - self._last_time, 1e-9)
    self._last_step, self._last_time = step, now
    eta = (self._total - step) / steps_per_sec if steps_per_sec > 0 else float('inf')
    return {'steps_per_sec': steps_per_sec, 'tokens_per_sec': steps_per_sec * self._tokens_per_step,
            'eta': format_duration(eta) if eta != float('inf') else '?'}

  def skip_time(self) -> None:
    """Leave time spent outside training steps (evaluation, checkpoints) out of the rate."""
    self._last_time = time.perf_counter()


def log(message: str) -> None:
  print(time.strftime('%H:%M:%S ') + message, flush=True)
