"""``python -m airflow_volcano_wandb <command>``: the provider's command line (``doctor``)."""

from __future__ import annotations

import argparse
import sys

from airflow_volcano_wandb.cli import doctor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_volcano_wandb")
    commands = parser.add_subparsers(dest="command", required=True)
    doctor.add_arguments(
        commands.add_parser("doctor", help="check a cluster and the connections are ready")
    )
    return doctor.main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
