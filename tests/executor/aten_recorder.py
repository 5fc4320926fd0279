"""Which aten operators a call ran: an instrument the executor puts around a Triton Function's calls.

Read by ``server.py``. Kept in a module of its own, with nothing else in reach of its methods,
because it lives in the submission's process: the submission can pop it from the dispatch-mode
stack, so what it records may only ever take credit away (``client.py`` refuses a Triton
Function whose forward ran a matmul or a softmax in PyTorch).
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class AtenRecorder(TorchDispatchMode):
    """Notes the name of every aten operator run while active (when ``active``), into ``names``.

    An instrument in the submission's process, which can pop it: what it records can only ever
    take credit away (a Triton Function whose forward ran a matmul or a softmax in PyTorch).
    """

    supports_higher_order_operators = True  # FlexAttention and the like are noted, not refused with an error

    def __init__(self, names: set[str], active: bool = True):
        super().__init__()
        self.names = names
        self.active = bool(active)

    def __enter__(self):
        return super().__enter__() if self.active else self

    def __exit__(self, *exc):
        return super().__exit__(*exc) if self.active else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = getattr(func, "overloadpacket", func)
        self.names.add(str(getattr(packet, "__name__", func)))
        return func(*args, **(kwargs or {}))
