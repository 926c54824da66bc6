"""A hard wall-clock budget for one training run (`attserve train --time-budget MINUTES`).

Unlike [train] max_wall_minutes (stop after the first dev evaluation past it), the budget is a
deadline the whole run keeps, data preparation included: before each optimizer step the trainer
asks whether that step, one more dev evaluation (to score the weights trained since the last
one) and the closing work (dev, test and out-of-domain metrics of the kept weights, the
checkpoint) still fit. When they do not, training ends there, the evaluation runs, and the best
weights by dev so far are the checkpoint.

Evaluation time is measured (examples per second of each dev pass; the trainer times a random
sample of dev before the first step); without any measurement it is estimated from the training
speed, conservatively.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

# Before any evaluation was timed: a forward pass (no backward, larger batches) is taken to be
# at least this many times faster per example than a training step. Measured on CPU with
# AttConv it is 3-5x; 2 keeps the estimate on the safe side.
EVAL_SPEEDUP_GUESS = 2.0
# Seconds kept for writing the checkpoint (weights, tokenizer, parity examples, metrics).
SAVE_SECONDS = 10.0
# Headroom on every estimate: GPU steps and evaluations vary with the bucket's lengths.
SAFETY = 1.25


@dataclass
class TimeBudget:
    """`minutes` from `started` (a `clock()` reading). `clock` is injectable for tests."""

    minutes: float
    started: float
    clock: Callable[[], float] = time.perf_counter
    eval_seconds_per_example: float | None = None  # measured on the last dev evaluation
    evaluations: list[tuple[int, float]] = field(default_factory=list)  # (examples, seconds) of each

    def __post_init__(self) -> None:
        if self.minutes <= 0:
            raise ValueError(f"time budget must be positive, not {self.minutes} minutes")

    @property
    def deadline(self) -> float:
        return self.started + 60.0 * self.minutes

    def remaining(self) -> float:
        return self.deadline - self.clock()

    def record_evaluation(self, examples: int, seconds: float) -> None:
        self.evaluations.append((examples, seconds))
        if examples > 0:
            self.eval_seconds_per_example = seconds / examples

    def evaluation_seconds(self, examples: int, train_seconds_per_example: float | None) -> float:
        """Estimated seconds to score `examples` examples."""
        if self.eval_seconds_per_example is not None:
            per_example = self.eval_seconds_per_example
        elif train_seconds_per_example is not None:
            per_example = train_seconds_per_example / EVAL_SPEEDUP_GUESS
        else:
            return 0.0
        return examples * per_example

    def reserve(self, dev_examples: int, final_examples: int, train_seconds_per_example: float | None) -> float:
        """Seconds to keep free after a step: one dev evaluation, the final metrics over
        `final_examples` (dev, test, out-of-domain sets) and the checkpoint."""
        scoring = self.evaluation_seconds(dev_examples + final_examples, train_seconds_per_example)
        return SAFETY * scoring + SAVE_SECONDS

    def step_fits(self, step_seconds: float, reserve_seconds: float) -> bool:
        """Whether one more step of `step_seconds` and then `reserve_seconds` end before the deadline."""
        return self.clock() + SAFETY * step_seconds + reserve_seconds <= self.deadline


__all__ = ["TimeBudget", "EVAL_SPEEDUP_GUESS", "SAVE_SECONDS", "SAFETY"]
