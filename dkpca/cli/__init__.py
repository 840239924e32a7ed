"""The ``dkpca`` command line: fit, plan, info, transform, demo.

Errors caused by the user's input exit with status 2 and one line on stderr
(``dkpca: error: ...``), never a traceback.  Log messages of the ``dkpca``
logger (a fit's one plan line, its stages and passes, the dashboard link) go
to stderr at INFO level; ``-v`` adds DEBUG (each decision's reason),
``--log-level LEVEL`` sets it, ``--quiet`` leaves only errors.  Progress (a
bar on a terminal, a line per tenth of the work in a log) goes to stderr too;
results go to stdout (``fit --json``, ``info --json``: one JSON object).

``dkpca --help`` must answer at once, so this package imports only the
standard library, numpy and the registries (kernels, solvers, and
:mod:`dkpca.request.options`: the choices and defaults of the options) at
import time; each command imports the layers it runs (scikit-learn, Dask,
distributed, Zarr) when it runs, and the exception types of user errors are
imported when an error is being explained.  ``tests/test_cli.py`` checks this
in a fresh interpreter.

* :mod:`.parser` -- subcommands and options (``fit`` and ``plan`` share one declaration);
* :mod:`.commands` -- what each subcommand does;
* :mod:`.errors` -- the one error line, and which exceptions are the user's to fix.

``dkpca.cli:main`` is the command; the console script (``dkpca.__main__:main``,
also ``python -m dkpca``) imports it under a Ctrl-C handler, and ``python -m
dkpca.cli`` runs it too.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import signal
import sys
import threading
import warnings
from typing import Any

from .commands import COMMANDS, model_facts
from .demo import held_out_centroid_accuracy, make_demo_data
from .errors import error, explain, hush_abandoned_io
from .parser import build_parser

__all__ = ["main", "build_parser", "COMMANDS", "explain", "model_facts", "make_demo_data",
           "held_out_centroid_accuracy"]


def log_level(a: argparse.Namespace) -> int:
    """The ``dkpca`` logger's level a command runs at: ``--log-level``, else INFO less 10 a ``-v``; ERROR if quiet."""
    if getattr(a, "quiet", False):
        return logging.ERROR
    if getattr(a, "log_level", None):
        return logging.getLevelName(a.log_level)
    return max(logging.DEBUG, logging.INFO - 10 * (getattr(a, "verbose", None) or 0))


class HeldWarnings:
    """Python warnings as one line each, ``dkpca: warning: ...``, held while the command has said nothing.

    An error found first (the input checked before any work) then stays the only line -- the warnings it
    followed go into it (a CSV's row-index column warned of is why its features are one too many) -- and a
    command that goes on says them before its first line (the log handler's filter, :meth:`release`).
    """

    def __init__(self) -> None:
        self.held: list[str] = []
        self.spoke = False

    def show(self, message: Warning | str, *args: object, **kwargs: object) -> None:  # warnings.showwarning
        text = " ".join(str(message).split())
        if self.spoke:
            sys.stderr.write(f"dkpca: warning: {text}\n")
        elif text not in self.held:
            self.held.append(text)

    def release(self, record: object = None) -> bool:
        """Say the held warnings now (the command speaks); True, as a logging filter that keeps ``record``."""
        self.spoke, held, self.held = True, self.held, []
        for text in held:
            sys.stderr.write(f"dkpca: warning: {text}\n")
        return True

    def into(self, message: str) -> str:
        """The error line's ``message`` with the warnings held before it."""
        return message + "".join(f" (It followed a warning: {text})" for text in self.held)


class _SaysHeldFirst:
    """stderr while a command runs: the first thing it writes other than a log record (a progress line, a bar)
    says the held warnings before it, as a log record does through :meth:`HeldWarnings.release`."""

    def __init__(self, stream: Any, held: HeldWarnings) -> None:
        self._stream, self._held = stream, held

    def write(self, text: str) -> int:
        if text and not self._held.spoke:  # release writes through here too, once spoke is set
            self._held.release()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:  # isatty, flush, fileno, encoding: the stream's own
        return getattr(self._stream, name)


class _Lines(logging.Formatter):
    """``dkpca: MESSAGE``; a warning ``dkpca: warning: MESSAGE``, as a Python warning is shown."""

    def format(self, record: logging.LogRecord) -> str:
        kind = "warning: " if record.levelno == logging.WARNING else ""
        return f"dkpca: {kind}{record.getMessage()}"


def _setup_logging(level: int) -> logging.Handler | None:
    """dkpca's messages at ``level`` and above on stderr (INFO: plan line, stages, passes, dashboard link).

    Returns the handler added, which :func:`main` removes when the command
    ends: a handler left behind would hold this call's ``sys.stderr``, which a
    caller of ``main`` (a test's capture, a notebook) may have closed since.
    """
    log = logging.getLogger("dkpca")
    log.setLevel(level)
    if any(getattr(h, "_dkpca_cli", False) for h in log.handlers):
        return None  # main() called from within a command (nested): its caller's handler speaks
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(_Lines())
    h._dkpca_cli = True
    log.addHandler(h)
    return h


#: what the line after Ctrl-C says per command: only what a rerun really does
_INTERRUPTED = {
    "fit": "; rerun the same command to resume from the store",
    "transform": "; rerun the same command to finish {a.output} (chunks already written are kept; until then "
                 "it is marked incomplete)",
    "demo": "; rerun the demo to start it again",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch system's walltime, ``scancel``, ``kill``) met as Ctrl-C is: the same cleanup -- the
    cluster closed, the store's lock released, what is done kept -- and one line; exit status 143."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM raises :class:`Terminated` while a command runs (only the main thread can take a signal).

    Python runs a signal's handler at whatever bytecode the main thread is at, a finaliser or a weakref callback
    (an import's module lock) too, where an exception cannot propagate: it printed "Exception ignored in ...",
    and the command ran on to the end, exit 0, as if no signal had come.  Such a swallowed interrupt is sent
    again instead, a moment later, to be taken outside the callback.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old, previous = signal.signal(signal.SIGTERM, _terminate), sys.unraisablehook

    def again(unraisable: Any) -> None:
        swallowed = unraisable.exc_value
        if isinstance(swallowed, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            # from another thread, a moment later: raised here, the handler would run inside this hook at once
            resend = threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGTERM if isinstance(swallowed, Terminated)
                                                     else signal.SIGINT))
            resend.daemon = True
            resend.start()
            return
        previous(unraisable)

    sys.unraisablehook = again
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        sys.unraisablehook = previous


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on its write end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or stdout is not a file
        return True  # the BrokenPipeError itself is the best evidence left


def _reader_gone() -> int:
    """Exit quietly when the reader of stdout went away, as ``head`` expects of a writer.

    Python's advice (``signal`` docs, "Note on SIGPIPE"): stdout to devnull, so
    the last flush at exit cannot fail again.  The status is a SIGPIPE death's,
    as a C tool's (141, what ``set -o pipefail`` reports of ``yes | head -1``):
    not 1, ``dkpca verify``'s "damaged", nor 2, a user error.
    """
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 128 + getattr(signal, "SIGPIPE", 13)


def main(argv: list[str] | None = None) -> int:
    try:
        a = build_parser().parse_args(argv)
    except KeyboardInterrupt:  # before any command ran: nothing to say of a rerun
        print("dkpca: interrupted", file=sys.stderr)
        return 130
    log, dist = logging.getLogger("dkpca"), logging.getLogger("distributed")
    old_level, old_dist = log.level, dist.level
    level = log_level(a)
    handler = _setup_logging(level)
    if level >= logging.ERROR:  # -q, --log-level ERROR: e.g. distributed's "port in use" notices
        dist.setLevel(logging.ERROR)
    held = HeldWarnings()
    if handler is not None:
        handler.addFilter(held.release)
    try:
        # (left before an error is said: the error line carries the warnings held)
        with warnings.catch_warnings(), _terminate_as_interrupt(), \
                contextlib.redirect_stderr(_SaysHeldFirst(sys.stderr, held)):
            warnings.showwarning = held.show  # restored by catch_warnings
            if level > logging.WARNING:  # -q, --log-level ERROR or CRITICAL: warnings are not said
                warnings.simplefilter("ignore")
            status = COMMANDS[a.command](a)
            held.release()
            sys.stdout.flush()  # a reader that went away ('dkpca info STORE | head -1') is found here, not at exit
            return status
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # some other pipe (a socket): not the reader of our output
        return _reader_gone()
    except Exception as exc:
        message = explain(exc)
        if message is None:
            held.release()
            raise  # a genuine bug or an unexpected system failure: keep the traceback
        hush_abandoned_io()
        return error(held.into(message))
    except KeyboardInterrupt as exc:
        held.release()
        hush_abandoned_io()
        what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"dkpca: {what}{_INTERRUPTED.get(a.command, '').format(a=a)}", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130
    finally:
        log.setLevel(old_level)
        dist.setLevel(old_dist)
        if handler is not None:
            log.removeHandler(handler)
