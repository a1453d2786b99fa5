"""Errors and the exit codes they map to (documented in docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

EXIT_OK = 0
EXIT_ERROR = 1  # bad input, unreachable source, stale export, lint failure
EXIT_USAGE = 2  # wrong arguments (Typer/Click uses 2 as well)
EXIT_CONFLICT = 3  # a patch does not apply (conflict, already upstream, target vanished)
EXIT_UNVERIFIED = 4  # everything applied, but a patch's tests gave no evidence (all skipped, none, not run)


class Dsv4Error(Exception):
    """An error with a one-line message that names the file/patch/line and what to do."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, hint: str | None = None, details: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ConfigError(Dsv4Error):
    pass


class PatchFormatError(Dsv4Error):
    pass


class SourceError(Dsv4Error):
    pass


class UsageError(Dsv4Error):
    exit_code = EXIT_USAGE


class ConflictError(Dsv4Error):
    exit_code = EXIT_CONFLICT

    def __init__(self, message: str, *, report=None, **kw):
        super().__init__(message, **kw)
        self.report = report


# What a ConflictError reports (`report`): the build (tree.py) and its verification (verify.py) both
# raise one, so the types live here, below both.
@dataclass
class HunkReport:
    file: str
    header: str
    expected: list[str]


@dataclass
class PatchFailure:
    patch: str
    kind: str  # conflict | upstreamed | missing-file | incomplete
    message: str
    files: list[str] = field(default_factory=list)
    hunks: list[HunkReport] = field(default_factory=list)
    failed_tree: str | None = None

    def to_dict(self) -> dict:
        return {
            "patch": self.patch, "kind": self.kind, "message": self.message, "files": self.files,
            "hunks": [h.__dict__ for h in self.hunks], "failed_tree": self.failed_tree,
        }
