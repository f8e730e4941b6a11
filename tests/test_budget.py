"""A time budget's course (training/budget.py): the learning rate's fall to 0 and the validations' size."""

import pytest

from nplm_jax.training import budget

pytestmark = [pytest.mark.fast, pytest.mark.unit]


def test_the_rate_is_whole_until_the_window_then_falls_linearly_to_zero_at_the_end():
  course = budget.BudgetCourse(budget=600.0, decay=0.5, eval_share=0.0, started=100.0)
  end = course.training_end(now=200.0, final_seconds=100.0, plan_seconds_left=1e9)  # the budget's end first
  assert end == 500.0  # 600 less the final evaluation
  # training runs from 100 to 500: the last half, 300 to 500, falls from 1 to 0
  assert [course.lr_factor(t, end) for t in (100.0, 299.0, 300.0, 400.0, 500.0, 550.0)] == pytest.approx(
      [1.0, 1.0, 1.0, 0.5, 0.0, 0.0])
  assert course.training_end(now=200.0, final_seconds=100.0, plan_seconds_left=50.0) == 250.0  # the plan first


def test_no_decay_without_a_budget_or_a_start():
  assert budget.BudgetCourse(budget=0.0, decay=1.0, eval_share=0.0, started=0.0).lr_factor(10.0, 20.0) == 1.0
  assert budget.BudgetCourse(budget=60.0, decay=0.0, eval_share=0.0, started=0.0).lr_factor(10.0, 20.0) == 1.0
  assert budget.BudgetCourse(budget=60.0, decay=1.0, eval_share=0.0).lr_factor(10.0, 20.0) == 1.0


def test_validations_take_at_most_their_share_of_the_budget():
  course = budget.BudgetCourse(budget=600.0, decay=0.0, eval_share=0.1)
  # 60 s for 10 validations, of which the forecast aims at 0.9: 5.4 s each; a batch of 256 tokens at 1 ms a
  # token takes 0.256 s: 21 batches
  assert budget.FORECAST_MARGIN == 0.9
  assert course.validation_batches(1e-3, 256, validations=10, split_batches=1000) == 21
  assert course.validation_batches(1e-3, 256, validations=10, split_batches=20) == 20  # the whole split fits
  assert course.validation_batches(1.0, 256, validations=10, split_batches=20) == 1  # at least one batch
  assert budget.BudgetCourse(600.0, 0.0, 0.0).validation_batches(1e-3, 256, 10, 1000) == 1000  # no share: all


def test_the_shortest_budget_holds_the_start_one_validation_and_the_final_evaluation():
  assert budget.shortest_budget(spent_seconds=30.0, final_seconds=100.0, first_validation_seconds=50.0) == 200.0


def test_an_end_not_yet_measured_keeps_the_whole_rate():
  course = budget.BudgetCourse(budget=600.0, decay=1.0, eval_share=0.0, started=10.0)
  assert course.lr_factor(20.0, float('inf')) == 1.0
