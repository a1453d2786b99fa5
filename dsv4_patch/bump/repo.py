"""Scratch repositories that borrow objects (git alternates) instead of copying 40 MB trees."""

from __future__ import annotations

from pathlib import Path

from ..gitcmd import Git, init_repo


def objects_dir(git_dir: Path) -> Path:
    git_dir = Path(git_dir)
    return git_dir / ".git" / "objects" if (git_dir / ".git").is_dir() else git_dir / "objects"


def add_alternates(repo_git_dir: Path, sources: list[Path]) -> None:
    """Let repo read the objects of `sources` (their own alternates are followed by git)."""
    f = objects_dir(repo_git_dir) / "info" / "alternates"
    f.parent.mkdir(parents=True, exist_ok=True)
    have = f.read_text().split("\n") if f.exists() else []
    new = [str(objects_dir(s).resolve()) for s in sources]
    lines = [x for x in have if x] + [x for x in new if x not in have]
    f.write_text("".join(x + "\n" for x in dict.fromkeys(lines)))


def scratch(path: Path, sources: list[Path], *, bare: bool) -> Git:
    g = init_repo(path, bare=bare) if not (path / ("HEAD" if bare else ".git")).exists() else Git(path)
    add_alternates(path, sources)
    return g
