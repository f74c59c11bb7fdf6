"""What a `kubemesh` subcommand is, and the argument helpers every subcommand shares.

A subcommand is a `Command` value: its name, its help, a function that adds its arguments and
one that runs it. `kubemesh.services.tools.cli` lists the built-in ones explicitly and loads
others from the `kubemesh.commands` entry-point group (the scenario commands of
`kubemesh.scenarios.cli` arrive that way, since `services` imports nothing above it). Nothing
registers itself at import time.

Every command that talks to a running mesh takes the same connection options
(`add_connection_arguments`) and turns them into a `MeshEndpoint` in one place
(`endpoint_from_args`): `--kubeconfig [--context]`, `--apiserver [--token-file] [--ca-file]`,
else `--state-dir` (default `./.kubemesh`, what `kubemesh up` writes; the compose stack's is
`.kubemesh/compose`).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from kubemesh.services.model import bugs as bug_switches

if TYPE_CHECKING:
    from kubemesh.services.mesh.endpoint import MeshEndpoint

DEFAULT_STATE_DIR: Final = Path(".kubemesh")

Runner = Callable[[argparse.Namespace], "int | Awaitable[int]"]


@dataclass(frozen=True, kw_only=True)
class Command:
    """One `kubemesh` subcommand."""

    name: str
    help: str
    """One line for `kubemesh --help`."""
    configure: Callable[[argparse.ArgumentParser], None]
    """Adds the subcommand's arguments (may add its own sub-subcommands)."""
    run: Runner
    """Runs it; returns the exit code (a coroutine function is run with `asyncio.run`)."""
    description: str | None = None
    """Longer text for `kubemesh NAME --help` (default: `help`)."""


def bug_list(value: str) -> tuple[str, ...]:
    """For argparse: a comma-separated list of known bug switch names (`-NAME` turns one off)."""
    names = tuple(bug_switches.split_names(value))
    unknown = [n for n in names if not bug_switches.is_known(n)]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown bug switch(es) {', '.join(unknown)}; known: {', '.join(bug_switches.BY_NAME)} "
            "(see `kubemesh bugs`)")
    return names


def name_list(value: str) -> tuple[str, ...]:
    """For argparse: a comma-separated list of names."""
    return tuple(bug_switches.split_names(value))


def positive_int(value: str) -> int:
    """For argparse: an integer >= 1."""
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def positive_float(value: str) -> float:
    """For argparse: a number > 0."""
    x = float(value)
    if x <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return x


def add_state_dir(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--state-dir` (default ./.kubemesh)."""
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help="the state folder of the mesh (`kubemesh up` writes ./.kubemesh, the compose "
                             "stack .kubemesh/compose; default: ./.kubemesh)")


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that name a running mesh (see the module docstring)."""
    g = parser.add_argument_group("which mesh")
    add_state_dir(g)
    g.add_argument("--kubeconfig", type=Path, default=None, help="reach the mesh this kubeconfig names")
    g.add_argument("--context", default=None, help="the kubeconfig's context (default: its current-context)")
    g.add_argument("--apiserver", default=None,
                   help="the apiserver's URL (with --token-file and --ca-file), or the name of one of the mesh's "
                        "apiservers (apiserver-1) with several")
    g.add_argument("--token-file", type=Path, default=None, help="a file holding the bearer token")
    g.add_argument("--ca-file", type=Path, default=None, help="the CA certificate of an https apiserver")


def endpoint_from_args(args: argparse.Namespace) -> MeshEndpoint:
    """The mesh the connection options name; raises `EndpointError` with what is wrong."""
    from kubemesh.services.mesh.endpoint import MeshEndpoint  # noqa: PLC0415 - aiohttp only for mesh commands

    return MeshEndpoint.resolve(url=args.apiserver, token_file=args.token_file, ca_file=args.ca_file,
                                kubeconfig=args.kubeconfig, context=args.context, state_dir=args.state_dir)
