"""A TCP gate in front of a service the tests share, so that one test can take the service
away from its own job while the tests beside it keep using it:

- ``hang``: connections are still taken, but nothing goes through either way -- what a
  client sees of a process stopped with SIGSTOP (the kernel accepts, the bytes wait in the
  buffers); ``open`` lets everything waiting go on, as SIGCONT does;
- ``refuse``: the port closed and every connection through it dropped -- what a client sees
  of a stopped process; ``open`` listens on the same port again.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpGate:
    """Listens on 127.0.0.1 (``port``, picked at start) and relays to ``target``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._flowing = threading.Event()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self.port = 0
        self.open()

    def open(self) -> None:
        """Listening, and everything held going through."""
        with self._lock:
            if self._listener is None:
                listener = socket.socket()
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind(("127.0.0.1", self.port))
                listener.listen(64)
                self.port = listener.getsockname()[1]
                self._listener = listener
                threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        self._flowing.set()

    def hang(self) -> None:
        self._flowing.clear()

    def refuse(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self._flowing.set()  # nothing may stay held behind a closed port

    def close(self) -> None:
        self.refuse()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed: refused from now on
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._flowing.wait()  # hung: taken, and nothing more
        try:
            upstream = socket.create_connection(self._target, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            if self._listener is None:  # refused meanwhile
                client.close()
                upstream.close()
                return
            self._conns += [client, upstream]
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
