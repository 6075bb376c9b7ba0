"""The links between the cluster stack's nodes (``stack.py up --cluster``): one TCP relay
per ordered pair of nodes and per kind of traffic (replication fetches, the KRaft quorum),
so that one node can be cut off from its peers while the job still reaches it.

Each Kafka node reaches each peer only through the relay of that pair (its own
``controller.quorum.voters`` and its own replication listener name say so: ``cluster``),
and the job talks to the nodes' client listeners directly. Cutting a node (``stack.py cut
broker2``: its id written to the cut file) freezes every relay to or from it, as a network
partition does: connections stay open and bytes wait, new ones are taken and wait too;
healing it (``stack.py heal``) lets them flow again. Run as a stack service:

    python links.py LINKS_JSON CUT_FILE
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any


class Nodes:
    """Which nodes are cut, as the cut file says (read every 100 ms)."""

    def __init__(self, cut_file: Path) -> None:
        self._file = cut_file
        self._open: dict[int, asyncio.Event] = {}

    def event(self, node: int) -> asyncio.Event:
        if node not in self._open:
            self._open[node] = asyncio.Event()
            self._open[node].set()
        return self._open[node]

    async def reachable(self, *nodes: int) -> None:
        for node in nodes:
            await self.event(node).wait()

    async def watch(self) -> None:
        while True:
            try:
                cut = {int(x) for x in self._file.read_text().split()}
            except (FileNotFoundError, ValueError):
                cut = set()
            for node, ev in self._open.items():
                if node in cut:
                    ev.clear()
                else:
                    ev.set()
            for node in cut - self._open.keys():
                self.event(node).clear()
            await asyncio.sleep(0.1)


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, nodes: Nodes,
               ends: tuple[int, int]) -> None:
    try:
        while True:
            await nodes.reachable(*ends)
            data = await reader.read(65536)
            if not data:
                break
            await nodes.reachable(*ends)  # read before a cut: held until it heals
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def relay(link: dict[str, Any], nodes: Nodes) -> asyncio.Server:
    host, port = link["target"]
    ends = (int(link["from"]), int(link["to"]))

    async def accepted(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await nodes.reachable(*ends)
        try:
            tr, tw = await asyncio.open_connection(host, port)
        except OSError:
            w.close()
            return
        await asyncio.gather(pump(r, tw, nodes, ends), pump(tr, w, nodes, ends))

    return await asyncio.start_server(accepted, "127.0.0.1", int(link["port"]))


async def main(links_file: Path, cut_file: Path) -> None:
    nodes = Nodes(cut_file)
    links = json.loads(links_file.read_text())
    servers = [await relay(link, nodes) for link in links]
    print(f"relaying {len(servers)} links; cut file {cut_file}", flush=True)
    await nodes.watch()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
