"""A time budget that drives the run's course (train.max_seconds with train.budget_decay or
train.budget_eval_share): how long training can go on, the learning rate's fall to zero at that
moment, and validations that fit a share of the budget. The training loop measures, this decides.

Budgeted training (Li, Yumer & Ramanan, ICLR 2020): at equal time, a learning rate that reaches zero
exactly when the budget ends beats a schedule cut short by it. The end is re-estimated at every
dispatch from the measured rates (the final evaluation's, the step's), so a machine that slows down
or speeds up moves the end and the schedule with it; the rate multiplies the optimiser's own
schedule (and any annealing) and costs no compilation: it is the step's lr_scale argument.
"""

import dataclasses
import math

# The validations' size is forecast before any of them is timed (from the evaluation probe's rate), and a
# validation also saves the best parameters: the forecast aims at this much of the share, its error the
# rest (measured: runs aiming at the whole of a tenth took 8.8-10.1%).
FORECAST_MARGIN = 0.9


def shortest_budget(spent_seconds: float, final_seconds: float, first_validation_seconds: float) -> float:
  """The least train.max_seconds that leaves any training: what has run, one validation, and the final
  evaluation, with a tenth more for the steps between them, rounded up to 10 s."""
  return 10.0 * math.ceil(1.1 * (spent_seconds + final_seconds + first_validation_seconds) / 10.0)


@dataclasses.dataclass
class BudgetCourse:
  """The learning-rate factor and validation size of a budgeted run.

  budget: train.max_seconds; decay: train.budget_decay, the last fraction of the training time over
  which the rate falls linearly to 0 (1.0: the whole of it; 0: off); eval_share: train.budget_eval_share,
  the share of the budget validations during training may take (0: each over the whole split).
  """
  budget: float
  decay: float
  eval_share: float
  started: float | None = None  # the run's wall seconds when training's first dispatch had run

  @property
  def decaying(self) -> bool:
    return self.budget > 0 and self.decay > 0

  def training_end(self, now: float, final_seconds: float, plan_seconds_left: float) -> float:
    """The wall second training will stop at: the final evaluation's measured time before the budget's
    end, or the plan's last step when that comes first."""
    return min(self.budget - final_seconds, now + plan_seconds_left)

  def lr_factor(self, now: float, end: float) -> float:
    """1 until the decay's window, then linearly down to 0 at `end`."""
    if not self.decaying or self.started is None or not math.isfinite(end):  # no measured end yet
      return 1.0
    window = self.decay * max(end - self.started, 1e-9)
    return min(1.0, max(0.0, (end - now) / window))

  def validation_batches(self, seconds_per_token: float, batch_size: int, validations: int,
                         split_batches: int) -> int:
    """How many of the validation split's first batches each validation during training reads, so that
    `validations` of them take at most eval_share of the budget, FORECAST_MARGIN of it by the rate
    measured (the whole split when that fits, and at least one batch)."""
    if self.budget <= 0 or self.eval_share <= 0 or seconds_per_token <= 0:
      return split_batches
    seconds_each = FORECAST_MARGIN * self.eval_share * self.budget / max(validations, 1)
    return max(1, min(split_batches, int(seconds_each / (seconds_per_token * batch_size))))
