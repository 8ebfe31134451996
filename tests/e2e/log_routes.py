"""The test stack's network for Airflow's log servers under CeleryExecutor: each worker and
triggerer is a host of its own (a loopback address), and the API server asks
``http://<its host>:<worker_log_server_port>/log/...`` (or the triggerer's port), one port
for every host, as in the Helm chart where each pod has its own address.

On one machine the log servers cannot share a port: Airflow binds each to every address
(``serve_logs``, host ``""``). So each listens on a port of its own, and this process
forwards ``<host>:<common port>`` to it, as a Kubernetes Service maps its port to a pod's.
Plain TCP: what the API server sends (its signed request) and what the log server answers
pass unchanged.

    python -I tests/e2e/log_routes.py 127.0.0.6:40001=40017 127.0.0.7:40001=40018 ...

Standard library only, run isolated (``-I``): it needs nothing of the venv.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


def _forwarder(target_port: int):
    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            writer.close()  # the log server is down: the API server sees the refusal
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return forward


async def main(routes: list[str]) -> None:
    servers = []
    for route in routes:
        listen, target = route.split("=")
        host, port = listen.rsplit(":", 1)
        server = await asyncio.start_server(_forwarder(int(target)), host, int(port))
        servers.append(server)
        print(f"log route {host}:{port} -> 127.0.0.1:{target}", flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
