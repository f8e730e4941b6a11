"""Where a training run stands, beside its arrays: saved as JSON with every checkpoint.

The train state (step, parameters, optimiser state) is the arrays; this is the rest a resumed run
needs to behave as the uninterrupted one would: the best validation so far, the evaluations since,
the learning-rate scale and anneals, why it stopped, its history, the time it has taken and the losses
of the logging interval in progress.
"""

import dataclasses
import re

TIME_STOP = 'train.max_seconds={:g} spent'


def spent_budget(stop_reason: str) -> float | None:
  """The train.max_seconds a run stopped at (TIME_STOP), or None when something else stopped it. A
  run resumed with a larger budget (or none) goes on; with the same one it is finished."""
  found = re.fullmatch(r'train\.max_seconds=(\S+) spent', stop_reason)
  return float(found.group(1)) if found else None


@dataclasses.dataclass
class RunState:
  best_valid_ppl: float | None = None  # of every evaluation: its parameters are in best/ and the result
  best_step: int | None = None  # the step of the parameters in best/
  # What annealing and patience judge by: the scheduled evaluations only (every evaluation of an
  # uninterrupted run). The extra one of a run stopped between them (its time budget) may give best/
  # its parameters, not move these, so a resumed run keeps the uninterrupted run's course.
  scheduled_best_ppl: float | None = None
  evals_since_best: int = 0  # scheduled evaluations since scheduled_best_ppl last improved
  lr_scale: float = 1.0  # learning-rate annealing multiplies the optimiser's step by this
  anneals: int = 0
  stopped_early: bool = False
  stop_reason: str = ''  # why it stopped early, in words (for the log and a resumed run)
  history: list[dict] = dataclasses.field(default_factory=list)  # one entry per evaluation
  wall_seconds: float = 0.0  # training time of every process that worked on this run so far
  # The training losses summed since the last train.log_every boundary (and how many steps): a run resumed
  # between two boundaries logs the mean over the whole interval, as the uninterrupted run does.
  interval_loss_sum: float = 0.0
  interval_steps: int = 0
  # A budgeted run (training/budget.py): the wall seconds at which training's first dispatch had run (the
  # start of the learning rate's course), and the validation split's first batches that each validation
  # during training reads (0: all of them), both fixed once chosen so that a resumed run keeps them.
  training_started: float | None = None
  valid_batches: int = 0
  validation_seconds: float = 0.0  # the wall seconds the validations during training took, all processes' runs

  def to_json(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, saved: dict) -> 'RunState':
    """Fields an older checkpoint lacks take their defaults; fields it has that are gone are dropped."""
    known = {f.name for f in dataclasses.fields(cls)}
    saved = {k: v for k, v in saved.items() if k in known}
    saved.setdefault('scheduled_best_ppl', saved.get('best_valid_ppl'))  # saved before the two were told apart
    return cls(**saved)

  def record_evaluation(self, step: int, epoch: float, valid_ppl: float, scheduled: bool = True) -> bool:
    """Adds an evaluation to the history; True when it is the best so far (of every evaluation)."""
    improved = self.best_valid_ppl is None or valid_ppl < self.best_valid_ppl
    if improved:
      self.best_valid_ppl, self.best_step = valid_ppl, step
    if scheduled:
      if self.scheduled_best_ppl is None or valid_ppl < self.scheduled_best_ppl:
        self.scheduled_best_ppl, self.evals_since_best = valid_ppl, 0
      else:
        self.evals_since_best += 1
    self.history.append({'step': step, 'epoch': epoch, 'valid_ppl': valid_ppl, 'lr_scale': self.lr_scale})
    return improved

  def anneal(self, factor: float) -> None:
    """Lowers the learning rate; patience counts afresh from here."""
    self.lr_scale *= factor
    self.anneals += 1
    self.evals_since_best = 0

  def stop(self, reason: str) -> None:
    self.stopped_early, self.stop_reason = True, reason
