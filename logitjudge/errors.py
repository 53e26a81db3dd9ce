"""The errors logitjudge raises to a user: one base, :class:`LogitJudgeError`, under which every error class of the
package sits, each with a message that names the problem and the fix. The command line catches the base (exit 2,
one line); anything else is a bug (exit 1)."""

from __future__ import annotations


class LogitJudgeError(Exception):
    """Base of every error logitjudge raises on purpose (bad input, an unsupported model, a failed audit)."""


class ProbeError(LogitJudgeError, ValueError):
    """Bad input or an unsupported model for probing (a hook point the model does not have)."""


class ModeError(LogitJudgeError, ValueError):
    """A prefix mode (backend) that does not exist, or cannot compute this model (or this use of it) exactly."""
