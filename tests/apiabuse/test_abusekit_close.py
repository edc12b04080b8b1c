"""The abuse kit's own reading of a server that says GOAWAY and closes (the kit, not the agent).

A server thread on a unix socket speaks HTTP/2 with h2's server side: it reads the client's preface, sends
GOAWAY ENHANCE_YOUR_CALM and closes, as gRPC core does to a PING flood. The abuser's next send then fails
(EPIPE); the GOAWAY that arrived before it must still be read. In a CI run it was not: the flood's send
failed first, and the test saw an EOF without the GOAWAY the agent had sent.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import h2.config
import h2.connection
from abusekit import RawH2
from h2.errors import ErrorCodes


def _goaway_server(path: str, ready: threading.Event, done: threading.Event) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(path)
        srv.listen(1)
        ready.set()
        peer, _ = srv.accept()
        with peer:
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
            conn.initiate_connection()
            peer.settimeout(5)
            conn.receive_data(peer.recv(1 << 16))
            conn.close_connection(error_code=ErrorCodes.ENHANCE_YOUR_CALM, additional_data=b"too_many_pings")
            peer.sendall(conn.data_to_send())
    done.set()


def test_a_goaway_sent_before_the_close_is_read_when_our_send_fails_first(tmp_path: Path) -> None:
    path = str(tmp_path / "h2.sock")
    ready, done = threading.Event(), threading.Event()
    server = threading.Thread(target=_goaway_server, args=(path, ready, done), daemon=True)
    server.start()
    assert ready.wait(5)
    abuser = RawH2(path)
    try:
        assert done.wait(5), "the server did not close"
        abuser.conn.ping(b"\x00" * 8)
        sent = abuser.send(abuser.conn.data_to_send())
        assert not sent, "the send to a closed peer succeeded"
        assert abuser.closed_by_peer
        assert abuser.goaway is not None, abuser.how_closed()
        assert abuser.goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
        assert abuser.goaway.additional_data == b"too_many_pings"
    finally:
        abuser.close()
        server.join(5)
