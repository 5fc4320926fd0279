"""The autograd bridge: a tensor that has a graph in the executor gets a stand-in graph in the harness.

Read by ``client.py`` (which builds the stand-in for each returned tensor that has a graph there)
and by ``harness/flash_cases.py`` (``saved_tensors``). The contract:

- ``stand_in_graph(executor, output, graph_id, inputs)`` returns ``output`` as the result of one
  ``_ExecutorGraph`` node whose inputs are the harness's tensors that required grad in the call,
  so ``torch.autograd.grad(O, (Q, K, V), dO)`` runs that node's backward, which sends dO to the
  executor (``Executor.backward``) and returns the dQ, dK, dV it computed there;
- ``saved_tensors(O)`` fetches copies of what the submission's forward saved for O's backward
  (``Executor.saved_tensors``), only when a test asks;
- a node whose executor was restarted since (a later ``generation``) raises ``ExecutorFailure``
  when used, instead of asking the new process about a graph it never had.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

__tracebackhide__ = True  # pytest leaves the stand-in node out of a failure's traceback: plumbing, not the test

if TYPE_CHECKING:
    from .client import Executor


@dataclass(frozen=True)
class GraphLink:
    """Where the real graph of a returned tensor lives: its executor, its id there, and the process it was made in."""

    executor: Executor
    graph_id: int
    generation: int
    n_inputs: int
    tag: str | None


def stand_in_graph(executor: Executor, output: torch.Tensor, graph_id: int, inputs: list[torch.Tensor]) -> torch.Tensor:
    """``output`` (a returned tensor whose graph ``graph_id`` stays in ``executor``) as the output of a
    stand-in node over ``inputs``, the call's tensors that require grad."""
    link = GraphLink(executor, graph_id, executor.generation, len(inputs), executor._tag)
    return _ExecutorGraph.apply(link, [output], *inputs)


def saved_tensors(output: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
    """What the submission's forward saved for ``output``'s backward, if ``output`` came from the executor; else None."""
    link = getattr(output.grad_fn, "link", None)
    if not isinstance(link, GraphLink):
        return None
    return link.executor.saved_tensors(link)


class _ExecutorGraph(torch.autograd.Function):
    """A stand-in node: its backward asks the executor for the gradients of the real graph."""

    @staticmethod
    def forward(ctx, link: GraphLink, box: list, *inputs):
        ctx.link = link
        return box[0]

    @staticmethod
    def backward(ctx, grad):
        grads = ctx.link.executor.backward(ctx.link, grad)
        return (None, None, *grads)
