"""Command line: ``python -m airflow_volcano_wandb.testing.cluster up|down|status|build``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_volcano_wandb.testing.cluster import build, cluster


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_volcano_wandb.testing.cluster",
        description="Local Kubernetes + Volcano cluster with simulated GPU nodes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("up", "build what is missing, start, wait until ready, print the kubeconfig path"),
        ("down", "stop every component of the cluster"),
        ("status", "report components, pids and memory (exit 1 if not running)"),
        ("podlogs", "internal: the pod log writer component"),
    ):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("--state-dir", type=Path, required=True)
        if name == "up":
            cmd.add_argument("--nodes", type=int, default=cluster.DEFAULT_NODES)
            cmd.add_argument("--gpus-per-node", type=int, default=cluster.DEFAULT_GPUS_PER_NODE)
            cmd.add_argument(
                "--timeout",
                type=float,
                default=180.0,
                help="seconds to wait for readiness (the build is not counted)",
            )
            for flag, env, does in (  # switches an environment variable also turns on
                (
                    "--audit-log",
                    cluster.AUDIT_LOG_ENV,
                    "write the kube-apiserver's audit log (Metadata level) to DIR/logs/audit.log",
                ),
                (
                    "--real-node",
                    cluster.REAL_NODE_ENV,
                    "add a real kubelet node whose pods run (containerd, CNI, CoreDNS; the "
                    "trainer image built and imported; needs root)",
                ),
            ):
                default = bool(os.environ.get(env))
                cmd.add_argument(
                    flag, action="store_true", default=default, help=f"{does} (also: ${env}=1)"
                )
        if name == "status":
            cmd.add_argument("--json", action="store_true")
    sub.add_parser("build", help="only build (or find cached) binaries, print their paths")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "up":
            info = cluster.up(
                args.state_dir,
                nodes=args.nodes,
                gpus_per_node=args.gpus_per_node,
                timeout=args.timeout,
                audit_log=args.audit_log,
                real_node=args.real_node,
            )
            print(info.kubeconfig)
        elif args.command == "down":
            cluster.down(args.state_dir)
        elif args.command == "status":
            report = cluster.status(args.state_dir)
            if args.json:
                print(json.dumps(report, indent=2))
            else:
                print(f"state dir : {report['state_dir']}")
                print(f"running   : {report['running']}")
                print(f"server    : {report['server']}")
                print(f"kubeconfig: {report['kubeconfig']}")
                print(f"audit log : {report['audit_log'] or '-'}")
                for name, comp in report["components"].items():
                    pid = comp["pid"] or "-"
                    print(f"  {name:<24} pid {pid!s:<8} rss {comp['rss_mib']:>7.1f} MiB")
                print(f"  {'total':<24} {'':<12} rss {report['total_rss_mib']:>7.1f} MiB")
            return 0 if report["running"] else 1
        elif args.command == "build":
            for name, path in build.ensure_binaries().items():
                print(f"{name}\t{path}")
        elif args.command == "podlogs":
            from airflow_volcano_wandb.testing.cluster import podlogs

            state_dir = args.state_dir.resolve()
            server = json.loads((state_dir / "state.json").read_text())["server"]
            podlogs.run(cluster.admin_client(state_dir, server), state_dir / "podlogs")
    except (cluster.ClusterError, build.BuildError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
