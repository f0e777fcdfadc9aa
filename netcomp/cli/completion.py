"""Generates bash completion for `netcomp` from the argument parser (parser.py), so that it offers every command
and option there is. `make completion` writes packaging/netcomp.bash-completion; a test fails when it differs. An
option's value completes to its choices, else to what its metavar names (METAVAR_KINDS), else to nothing."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from netcomp.cli.parser import build_parser

FILES, DIRS, NOTHING = "files", "dirs", ""
# What a metavar names: the kind of word to offer for it.
METAVAR_KINDS = {"FILE": FILES, "PATH": FILES, "NETNS": FILES, "DIR": DIRS}

_HEAD = r"""# bash completion for netcomp                                       -*- shell-script -*-
# Generated from netcomp's argument parser by `make completion` (netcomp/cli/completion.py): do not edit.

# Offer words ($1: a list, "files" or "dirs") that start with $cur.
_netcomp_offer()
{
    local IFS=$'\n'
    case $1 in
        files) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur")) ;;
        dirs) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$cur")) ;;
        *) IFS=$' \t\n'; COMPREPLY=($(compgen -W "$1" -- "$cur")) ;;
    esac
}

_netcomp()
{
    COMPREPLY=()
    local cur=${COMP_WORDS[COMP_CWORD]} prev= i n=0 cmd= kind= options= values= positionals= more=
    # bash splits `--option=value` at the '=' (COMP_WORDBREAKS): complete the value of that option.
    if [[ $cur == = ]]; then
        prev=${COMP_WORDS[COMP_CWORD-1]} cur=
    elif ((COMP_CWORD > 1)) && [[ ${COMP_WORDS[COMP_CWORD-1]} == = ]]; then
        prev=${COMP_WORDS[COMP_CWORD-2]}
    elif ((COMP_CWORD > 0)); then
        prev=${COMP_WORDS[COMP_CWORD-1]}
    fi
    # The command: the first word that is not an option (netcomp's own options take no value).
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ ${COMP_WORDS[i]} == -* ]] || { cmd=${COMP_WORDS[i]}; break; }
    done
    # Per command: `values` the options that take a value, and what each completes to (from `prev`);
    # `positionals` what each positional argument completes to, `more` what any further ones do.
    case $cmd in
"""

_TAIL = r"""    esac
    if [[ $cur == -* ]]; then
        _netcomp_offer "$options"
        return 0
    fi
    # Which positional argument this is: the words after the command that are neither options nor their values.
    for ((i++; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            =) ((i++)) ;;
            -*) [[ " $values " == *" ${COMP_WORDS[i]} "* && ${COMP_WORDS[i+1]} != = ]] && ((i++)) ;;
            *) ((n++)) ;;
        esac
    done
    local -a kinds=()
    IFS='|' read -r -a kinds <<<"$positionals"
    if ((n < ${#kinds[@]})); then
        kind=${kinds[n]}
    else
        kind=$more
    fi
    [[ -n $kind ]] && _netcomp_offer "$kind"
    return 0
}

complete -F _netcomp netcomp
"""


def _kind(action: argparse.Action) -> str:
    """What a value of this option or positional completes to."""
    if action.choices is not None:
        return " ".join(str(c) for c in action.choices)
    return METAVAR_KINDS.get(str(action.metavar), NOTHING)


def _quote(words: Sequence[str]) -> str:
    text = " ".join(words)
    assert "'" not in text, text  # option strings, choices and kinds never hold one
    return f"'{text}'"


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _case(name: str, parser: argparse.ArgumentParser) -> list[str]:
    """The branch of one command (name "": before any): its options, and what their values and positionals offer."""
    options = [o for a in parser._actions for o in a.option_strings]
    valued = [a for a in parser._actions if a.option_strings and a.nargs != 0]
    positionals = [a for a in parser._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    label = name or '""'  # the branch of no command yet
    out = [f"        {label})"]
    if valued:
        out.append("            case $prev in")
        for a in valued:
            kind = _kind(a)
            action = f'_netcomp_offer "{kind}"; return 0' if kind else "return 0"
            out.append(f"                {'|'.join(a.option_strings)}) {action} ;;")
        out.append("            esac")
    out.append(f"            options={_quote(options)}")
    out.append(f"            values={_quote([o for a in valued for o in a.option_strings])}")
    # Positional arguments one by one, then any number of the last kind; before a command, the command.
    fixed = [_kind(a) for a in positionals if a.nargs in (None, "?")] if name else [" ".join(sorted(_commands(parser)))]
    repeated = [_kind(a) for a in positionals if a.nargs in ("*", "+")]
    out.append(f"            positionals={_quote(['|'.join(fixed)])}")
    out.append(f"            more={_quote(repeated[:1])}")
    out.append("            ;;")
    return out


def bash(parser: argparse.ArgumentParser | None = None) -> str:
    """The bash completion script for `parser` (netcomp's)."""
    parser = parser or build_parser()
    lines = _case("", parser)
    for name, sub in sorted(_commands(parser).items()):
        lines += _case(name, sub)
    return _HEAD + "\n".join(lines) + "\n" + _TAIL


if __name__ == "__main__":
    print(bash(), end="")
