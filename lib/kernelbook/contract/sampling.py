"""Long generations in bounded memory: the profiler records windows of decode steps, not every step.

A generate of `max_new_tokens` new tokens runs the prefill (step 0, which yields the first token) and
`max_new_tokens - 1` decode steps (1 … N). With `sample_window: w` and `sample_every: e` the profiled
steps are the prefill (with the vision encode before it) and the windows [1, w], [1+e, e+w], … and a
last window ending at step N; every other step runs with the profiler idle, so the trace, the host
memory and the shapes pass grow with the number of windows, not with `max_new_tokens`. Every step of
the plain generates is still timed (capture.phases `clock`), so the book shows the whole curve.

Pure bookkeeping, no torch: the windows and the profiler's schedule over them (the book's check that
the windows stand for the whole decode is analyze.steps.agreement).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sampling:
    """Which steps of one generate the profiler records. `windows`: inclusive (first, last) decode steps."""

    decode_steps: int
    windows: tuple[tuple[int, int], ...]

    @property
    def steps(self) -> frozenset[int]:
        """Profiled steps: 0 (vision encode + prefill) and every step of every window."""
        return frozenset([0, *(s for a, b in self.windows for s in range(a, b + 1))])

    def action(self, step: int):
        """torch.profiler schedule: record the profiled steps, hand each window's trace over at its last
        step (RECORD_AND_SAVE), stay idle elsewhere."""
        from torch.profiler import ProfilerAction

        if step not in self.steps:
            return ProfilerAction.NONE
        return ProfilerAction.RECORD if step + 1 in self.steps else ProfilerAction.RECORD_AND_SAVE

    def describe(self) -> dict:
        return {"decode_steps": self.decode_steps, "windows": [list(w) for w in self.windows],
                "profiled_decode_steps": len(self.steps) - 1}


def sample_problems(max_new_tokens: int, window: int, every: int) -> list[str]:
    """What is wrong with `sample_window` / `sample_every` for a generate of `max_new_tokens` (empty: fine).
    `window: 0` turns sampling off."""
    if window == 0:
        return []
    n = max_new_tokens - 1
    out = []
    if n < 1:
        out.append(f"sample_window: {window} asks for decode windows, but max_new_tokens: {max_new_tokens} "
                   "has no decode step (set sample_window: 0)")
    elif window > n:
        out.append(f"sample_window: {window} steps run past the generation's {n} decode steps "
                   f"(max_new_tokens: {max_new_tokens}); use at most {n}, or sample_window: 0 to profile every step")
    if every < window:
        out.append(f"sample_every: {every} is shorter than sample_window: {window}, so windows would overlap; "
                   f"use sample_every ≥ {window}")
    return out


def plan(max_new_tokens: int, window: int, every: int) -> Sampling | None:
    """The windows for these parameters (None: sampling off, every step profiled). Windows start at step
    1, then every `every` steps; a last one ends at the last decode step (joined to the one before it
    where they would overlap)."""
    if window == 0:
        return None
    problems = sample_problems(max_new_tokens, window, every)
    if problems:
        raise ValueError("; ".join(problems))
    n = max_new_tokens - 1
    wins = [(a, a + window - 1) for a in range(1, n - window + 2, every)]
    if wins[-1][1] < n:
        last = (n - window + 1, n)
        wins = wins[:-1] + [(wins[-1][0], n)] if last[0] <= wins[-1][1] else wins + [last]
    return Sampling(n, tuple(wins))
