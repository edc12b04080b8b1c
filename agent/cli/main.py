"""`coloc-agent` command line: one entry point, one module per subcommand (imported only when used)."""

from __future__ import annotations

import importlib
import sys

from agent import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("agent.cli.run", "run the agent (--config FILE)"),
    "demo": ("agent.demo.runner", "show the agent working on this machine, on a private cgroup hierarchy"),
    "config": ("agent.cli.config", "check a config file, or show every key's value and where it came from"),
    "inspect": ("agent.cli.inspect", "sample this machine's cgroups and print the hierarchy"),
    "status": ("agent.cli.status", "node, lifecycle, ledger and last actions, over the agent's socket"),
    "top": ("agent.cli.top", "live view of tiers, BE budget, ledger and recent actions"),
    "record": ("agent.cli.record", "record the agent's trace for a while, over its admin socket"),
    "replay": ("agent.cli.replay", "what the agent would have done on a recorded trace, with other settings"),
    "recover": ("agent.cli.recover", "scheduler-side recovery: rebuild cluster state from agents"),
    "decommission": ("agent.cli.decommission", "gracefully decommission this node"),
    "recommission": ("agent.cli.decommission", "return a decommissioning or decommissioned node to service"),
}


def usage() -> str:
    lines = ["usage: coloc-agent [--version] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<14}{help_}" for name, (_, help_) in COMMANDS.items()]
    lines.append("\n`coloc-agent COMMAND --help` for a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(usage(), file=sys.stderr)
        return 2
    if args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] in ("-V", "--version"):
        print(f"coloc-agent {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"coloc-agent: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    if name in ("decommission", "recommission"):
        rest = [name, *rest]
    code: int = module.main(rest)
    return code


if __name__ == "__main__":
    sys.exit(main())
