"""bash completion (packaging/netcomp.bash-completion, installed as /usr/share/bash-completion/completions/netcomp):
the checked-in script is what the parser gives today, and bash, running it, completes commands, every option of
every command, option values and positional arguments."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import get_args

import pytest

from netcomp.cli import completion
from netcomp.cli.parser import build_parser
from netcomp.settings import CniVersion
from tests.lab.checkout import ROOT

SCRIPT = ROOT / "packaging" / "netcomp.bash-completion"


def complete(line: str, cwd: Path | None = None) -> list[str]:
    """What bash offers for `line` (the cursor at its end), with the script sourced as bash-completion does.
    COMP_WORDS is split as readline splits it: at blanks, and around the '=' of COMP_WORDBREAKS."""
    words = line.replace("=", " = ").split(" ")
    words = [w for i, w in enumerate(words) if w or i == len(words) - 1]
    quoted = " ".join("'" + w + "'" for w in words)
    program = (
        f"source {SCRIPT} && COMP_WORDS=({quoted}) && COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)) && "
        f"COMP_LINE='{line}' && COMP_POINT=${{#COMP_LINE}} && _netcomp && printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True, text=True, cwd=cwd)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return sorted(w for w in p.stdout.splitlines() if w)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    for action in build_parser()._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            return dict(choices)
    raise AssertionError("the parser has no commands")


def test_the_shipped_script_is_current() -> None:
    assert SCRIPT.read_text() == completion.bash(), "stale: run `make completion` and commit the script"


def test_the_package_installs_it() -> None:
    rules = (ROOT / "debian" / "rules").read_text()
    assert (
        "install -D -m 0644 packaging/netcomp.bash-completion $(DEST)/usr/share/bash-completion/completions/netcomp"
        in rules
    )


def test_commands() -> None:
    assert complete("netcomp ") == sorted(_subparsers())
    assert complete("netcomp comp") == ["compile"]
    assert complete("netcomp --") == ["--help", "--version"]


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_every_option_of_every_command(command: str) -> None:
    parser = _subparsers()[command]
    options = sorted(o for a in parser._actions for o in a.option_strings)
    assert complete(f"netcomp {command} -") == options
    assert "--help" in options and "--version" in options


def test_option_values() -> None:
    assert complete("netcomp compile --output ") == ["json", "text"]
    assert complete("netcomp compile --output=j") == ["json"]
    assert complete("netcomp validate -o t") == ["text"]
    assert complete("netcomp daemon --log-level w") == ["warning"]
    assert complete("netcomp compile --cni-version ") == sorted(get_args(CniVersion))
    assert complete("netcomp attach --ifname e") == []  # a name of the user's choosing: nothing to offer


def test_paths_files_and_dirs(tmp_path: Path) -> None:
    (tmp_path / "networks.d").mkdir()
    (tmp_path / "netcomp.yaml").write_text("")
    assert complete("netcomp compile --out ", cwd=tmp_path) == ["networks.d"]
    assert complete("netcomp install-shim --cni-bin-dir n", cwd=tmp_path) == ["networks.d"]
    assert complete("netcomp validate ", cwd=tmp_path) == ["netcomp.yaml", "networks.d"]
    assert complete("netcomp status -c n", cwd=tmp_path) == ["netcomp.yaml", "networks.d"]
    assert complete("netcomp compile --diff --out networks.d n", cwd=tmp_path) == ["netcomp.yaml", "networks.d"]


def test_positional_arguments(tmp_path: Path) -> None:
    (tmp_path / "ns1").write_text("")
    assert complete("netcomp schema ") == ["config", "network"]
    assert complete("netcomp schema network ") == []
    assert complete("netcomp attach ctr1 n", cwd=tmp_path) == ["ns1"]  # NETNS: a path
    assert complete("netcomp attach --ifname eth3 ctr1 n", cwd=tmp_path) == ["ns1"]  # an option's value skipped
    assert complete("netcomp attach --ifname=eth3 ctr1 n", cwd=tmp_path) == ["ns1"]
    assert complete("netcomp attach ctr1 ns1 ", cwd=tmp_path) == []  # NETWORK: a name
