"""``torch.compile`` for the training forward, made safe to ask for by default.

:class:`CompiledForward` wraps a forward (a module or a function of the tokens) in
``torch.compile`` with two guarantees the bare call lacks:

* **A compile failure never ends a run.** ``torch.compile`` is lazy: a backend that cannot
  build the graph (no C compiler for inductor, an op dynamo does not support, a Python
  version it refuses) fails on the first call, or at a later recompile (a new shape). That
  call, and every later one, then runs the eager forward, after one warning naming the error.
  Nothing of the failed call ran (tracing and compiling come before execution), so the eager
  rerun computes the same step. Errors of the computation itself (out of memory, a bad
  shape) are not compile errors and propagate as they would eagerly.
* **Runtime type checks are not traced.** Under pytest the suite's import hook wraps the model
  code in jaxtyping + beartype checks (tests/conftest.py); dynamo cannot trace those (it trips
  a guard it set on the same frame). While the compiled forward runs, jaxtyping's own switch
  (``jaxtyping.config.jaxtyping_disable``) is on, so each wrapper calls the unchecked function
  straight away and dynamo traces only the model; the compiled graph guards on the switch,
  which is on whenever it runs. Eager calls (evaluation, the fallback) keep their checks. In a
  user's process there are no such wrappers and the switch changes nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jaxtyping
import torch


def compile_errors() -> tuple[type[BaseException], ...]:
    """What a failed compile raises: dynamo's errors (an unsupported construct, an internal
    error) and the backend's, which dynamo wraps in BackendCompilerFailed (inductor's
    InductorError is one). Anything else is an error of the computation and is not caught.
    Imported here, when a forward is compiled: torch._dynamo takes about as long to import as
    torch, and a run that does not compile (every CPU run) never needs it."""
    import torch._dynamo.exc

    return (torch._dynamo.exc.TorchDynamoException,)


class CompileFallbackWarning(RuntimeWarning):
    """torch.compile failed; the run continues with the eager forward."""


@contextmanager
def no_runtime_type_checks() -> Iterator[None]:
    """jaxtyping's wrappers call straight through for the duration (module docstring)."""
    old = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", old)


def _first_line(e: BaseException) -> str:
    """``Type: first line`` of ``e``, and of the backend's own error that it wraps."""
    lines = [line for line in str(e).splitlines() if line.strip()]
    text = f"{type(e).__name__}: {lines[0][:200]}" if lines else type(e).__name__
    inner = getattr(e, "inner_exception", None) or e.__cause__
    return f"{text} {_first_line(inner)}" if inner is not None and inner is not e else text


class CompiledForward:
    """``forward`` through ``torch.compile`` (``compile_fn``, keyword arguments ``options``),
    falling back to ``forward`` itself, with one :class:`CompileFallbackWarning`, when the
    compile fails (module docstring). ``fallback`` holds the error's first line once it has."""

    def __init__(self, forward: Callable[..., Any], compile_fn: Callable[..., Any] | None = None,
                 **options: Any):
        self.eager = forward
        self.fallback = ""
        self.compiled: Callable[..., Any] | None = None
        try:  # torch.compile refuses some setups at once (a Python version it does not support)
            self.compiled = (compile_fn or torch.compile)(forward, **options)
        except (RuntimeError, *compile_errors()) as e:
            self._fall_back(e)

    def _fall_back(self, e: BaseException) -> None:
        self.fallback = _first_line(e)
        warnings.warn(f"torch.compile failed ({self.fallback}); training continues with the "
                      "eager forward (same numbers, slower)", CompileFallbackWarning,
                      stacklevel=3)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.compiled is not None:
            try:
                with no_runtime_type_checks():
                    return self.compiled(*args, **kwargs)
            except compile_errors() as e:
                self.compiled = None
                self._fall_back(e)
        return self.eager(*args, **kwargs)
