"""The dashboard answers only requests addressed to a loopback name (DNS rebinding: a page elsewhere that re-points
its own name to 127.0.0.1 sends that name as the Host). Pages, health and the websocket alike; app/serve.py."""

from __future__ import annotations

import http.client

import pytest

from app.serve import allowed_hosts
from tests.dashboard_server import SHOTS, dashboard_server

PORT = 8602
WS = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


def _status(path: str, host: str, headers: dict | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.slow
def test_other_host_names_are_refused_on_every_route():
    SHOTS.parent.mkdir(parents=True, exist_ok=True)
    with dashboard_server(PORT, SHOTS.parent / "dashboard-host-header.log"):
        for host in (f"localhost:{PORT}", f"127.0.0.1:{PORT}", "localhost"):
            assert _status("/", host) == 200, host
            assert _status("/_stcore/health", host) == 200, host
        assert _status("/_stcore/stream", f"localhost:{PORT}", WS) == 101  # the app's websocket opens
        for host in ("evil.example", f"evil.example:{PORT}", "127.0.0.1.evil.example", "localhost.evil.example"):
            assert _status("/", host) == 400, host
            assert _status("/_stcore/health", host) == 400, host
            assert _status("/_stcore/stream", host, WS) == 400, host


def test_the_allowed_names():
    assert allowed_hosts("127.0.0.1") == ["localhost", "127.0.0.1", "::1", "[::1]"]
    assert allowed_hosts("192.168.1.7")[-1] == "192.168.1.7"
    assert allowed_hosts("0.0.0.0") == ["*"]  # every interface on purpose: its names are unknown (mmc warns)


def test_the_hook_exists_in_this_streamlit():
    """The one Streamlit internal app/serve.py wraps: if a release moves it, this says so."""
    from streamlit.web.server.starlette import starlette_app

    assert callable(starlette_app.create_streamlit_middleware)
