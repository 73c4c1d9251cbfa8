"""The experts a MoE's routers pick in each decode step (issue 42): what the physical limit of a batched step counts,
each expert the batch touches once. A batch of b tokens with top-k routing over E experts touches between k and
min(b·k, E) of them per layer; which, the timeline cannot tell (it records shapes, not values).

`routing_pass` runs the workload's generate once more, eagerly (`disable_compile`: a compiled step's ops never reach
a dispatch mode) and without the profiler, and keeps the indices of every top-k over a 2-d input [tokens, experts] in
the decode steps (tokens = the batch): after the generate, the distinct experts of each call are counted. The
generate's inputs are the capture's, so its tokens and routing are the timed generates' (greedy decoding)."""
from __future__ import annotations

import time
from dataclasses import replace

# decode steps the pass runs: enough for a mean over steps, few enough that a long generation does not pay its length
ROUTING_STEPS = 32
METHOD = ("an eager generate of the capture's inputs (no profiler, no compiled step), the top-k indices of every "
          "router call [tokens, experts] in its first {steps} decode steps, distinct experts counted per call")


def routing_pass(wl, batch: int, max_new_tokens: int) -> dict | None:
    """Per router shape (tokens, experts, k) in decode: calls, steps, and the distinct experts per call (mean, min,
    max) with the bound min(tokens·k, experts); None for a model whose decode runs no top-k over [batch, experts]
    (not a MoE). Also `seconds`, what the pass took."""
    steps = min(max_new_tokens - 1, ROUTING_STEPS)
    if steps < 1:
        return None
    n = steps + 1
    t = time.perf_counter()
    eager = replace(wl, gen_kwargs={**wl.gen_kwargs, "disable_compile": True, "max_new_tokens": n, "min_new_tokens": n})
    with topk_recorder(batch) as calls:
        eager.generate()
    routers = summarize(calls, steps)
    return {"method": METHOD.format(steps=steps), "routers": routers,
            "seconds": time.perf_counter() - t} if routers else None


def topk_recorder(tokens: int):
    """A dispatch mode that keeps (tokens, experts, k, indices) of every `aten.topk` over a 2-d input [tokens, experts]
    with `tokens` rows (a decode step's router); entering it gives the list it fills."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class TopK(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls: list[tuple[int, int, int, object]] = []

        def __enter__(self):
            super().__enter__()
            return self.calls

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.topk.default:
                x, k = args[0], (args[1] if len(args) > 1 else (kwargs or {}).get("k"))
                if x.dim() == 2 and x.shape[0] == tokens and x.shape[1] > 1 and k:
                    self.calls.append((int(x.shape[0]), int(x.shape[1]), int(k), out[1]))
            return out

    return TopK()


def summarize(calls: list, steps: int) -> list[dict]:
    """Per (tokens, experts, k) of the recorded calls: the distinct experts each call's indices hold."""
    import torch

    routers: dict[tuple[int, int, int], list[int]] = {}
    for tokens, experts, k, ix in calls:
        routers.setdefault((tokens, experts, k), []).append(int(torch.unique(ix).numel()))
    return [{"tokens": tokens, "experts": experts, "k": k, "calls": len(d), "steps": steps,
             "distinct_mean": sum(d) / len(d), "distinct_min": min(d), "distinct_max": max(d),
             "bound": min(tokens * k, experts)} for (tokens, experts, k), d in sorted(routers.items())]
