"""patches/stacks.toml against its declared schema: typos, wrong types, unsafe names and paths,
bytes TOML cannot hold. Each is one line naming file:line and the key, and nothing runs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from test_cli import TOOL

from dsv4_patch.config import load_project
from dsv4_patch.errors import ConfigError

GOOD = textwrap.dedent('''\
    [stacks.demo]
    upstream = "https://example.invalid/demo"
    commit = "abc123"

    [[stacks.demo.sources]]
    kind = "sdist"
    package = "demo"
    version = "1.0"

    [[stacks.demo.sources]]
    kind = "git"
    url = "https://example.invalid/demo.git"
    ''')


def write(tmp_path: Path, text: str | bytes) -> Path:
    (tmp_path / "patches").mkdir(exist_ok=True)
    f = tmp_path / "patches/stacks.toml"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    return f


def error(tmp_path: Path, text: str | bytes) -> str:
    write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_project(tmp_path)
    line = e.value.one_line()
    assert "\n" not in line
    return line.replace(str(tmp_path) + "/", "")


def test_the_good_file_loads(tmp_path):
    write(tmp_path, GOOD)
    cfg = load_project(tmp_path).stack("demo")
    assert [s.kind for s in cfg.sources] == ["sdist", "git"]


@pytest.mark.parametrize("text, expected", [
    # typos are errors, with the line, the table and the key (and the key meant)
    (GOOD.replace('version = "1.0"', 'version = "1.0"\nsha265 = "x"'),
     "patches/stacks.toml:9: [[stacks.demo.sources]] #1: unknown key 'sha265' (did you mean 'sha256'?"),
    (GOOD + 'exlude = ["a"]\n',
     "patches/stacks.toml:13: [[stacks.demo.sources]] #2: unknown key 'exlude'"),
    (GOOD.replace("[stacks.demo]", "[stack.demo]").replace("[[stacks.demo.", "[[stack.demo."),
     "patches/stacks.toml:1: top level: unknown key 'stack' (did you mean 'stacks'?"),
    (GOOD.replace('commit = "abc123"', 'commit = "abc123"\ntrack_branch = "main"'),
     "patches/stacks.toml:4: [stacks.demo]: unknown key 'track_branch'"),
    # wrong types
    (GOOD.split("[[")[0] + 'sources = "x"\n',
     "patches/stacks.toml:5: [stacks.demo]: 'sources' must be an array of tables"),
    (GOOD.replace('commit = "abc123"', 'commit = "abc123"\npatches = 5'),
     "patches/stacks.toml:4: [stacks.demo]: 'patches' must be a string, not an integer 5"),
    (GOOD.replace('commit = "abc123"', "commit = 123"),
     "patches/stacks.toml:3: [stacks.demo]: 'commit' must be a string, not an integer 123"),
    (GOOD.replace('version = "1.0"', "version = 1.0"),
     "patches/stacks.toml:8: [[stacks.demo.sources]] #1: 'version' must be a string, not a number 1.0"),
    (GOOD.replace('kind = "git"', 'kind = "svn"'),
     "patches/stacks.toml:11: [[stacks.demo.sources]] #2: kind 'svn' is not a source kind"),
    (GOOD.replace('commit = "abc123"\n', ""),
     "patches/stacks.toml:1: [stacks.demo]: missing required key 'commit'"),
    (GOOD.split("[[")[0],
     "patches/stacks.toml:1: [stacks.demo]: missing required key 'sources'"),
    ("# nothing here\n", "patches/stacks.toml: declares no stack"),
    # names and paths
    (GOOD.replace("stacks.demo", 'stacks."/abs/evil"'),
     "patches/stacks.toml:1: stack name '/abs/evil' is not a plain name"),
    (GOOD.replace("stacks.demo", 'stacks."../up"'), "stack name '../up' is not a plain name"),
    (GOOD.replace('commit = "abc123"', 'commit = "abc123"\npatches = "../../x"'),
     "patches/stacks.toml:4: [stacks.demo]: patches = '../../x' must name a folder inside patches/"),
    (GOOD.replace('commit = "abc123"', 'commit = "abc123"\npatches = "/etc"'), "must name a folder inside patches/"),
    (GOOD.replace('commit = "abc123"', 'commit = "abc123"\npatches = "."'), "must name a folder inside patches/"),
    # TOML syntax: file:line:column
    (GOOD + "x = \n", "patches/stacks.toml:13:5: Invalid value"),
])
def test_bad_config_is_one_line_naming_file_line_and_key(tmp_path, text, expected):
    assert expected in error(tmp_path, text)


def test_nul_and_latin1_bytes_are_one_line_errors(tmp_path):
    assert error(tmp_path, GOOD.encode() + b"# \x00\n") == \
        "patches/stacks.toml:13: NUL byte in the file (stacks.toml is UTF-8 text; remove the byte)"
    assert error(tmp_path, GOOD.encode() + "# café\n".encode("latin-1")).startswith(
        "patches/stacks.toml:13: byte 0xe9 is not UTF-8")


def test_patches_folder_through_a_symlink_out_of_patches_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    write(tmp_path, GOOD.replace('commit = "abc123"', 'commit = "abc123"\npatches = "link"'))
    (tmp_path / "patches/link").symlink_to(outside)
    with pytest.raises(ConfigError, match="must name a folder inside patches/"):
        load_project(tmp_path)


def test_cli_answers_a_bad_config_with_one_line_and_builds_nothing(tmp_path):
    import subprocess
    import sys

    write(tmp_path, GOOD.replace('version = "1.0"', 'version = "1.0"\nsha265 = "x"'))
    for args in (["apply"], ["check"], ["status", "--json"]):
        p = subprocess.run([sys.executable, str(TOOL), *args, "--project", str(tmp_path)],
                           capture_output=True, text=True)
        assert p.returncode == 1, args
        msg = json.loads(p.stdout)["error"] if "--json" in args else p.stderr.strip()
        assert "unknown key 'sha265'" in msg and len(msg.splitlines()) == 1
        assert "[[stacks.demo.sources]]" in msg  # square brackets survive the rendering
    assert sorted(x.name for x in tmp_path.iterdir()) == ["patches"]  # no build/ folder
