"""The dashboard answers only requests addressed to this machine by a loopback name (DNS rebinding: a page elsewhere
that re-points its own name to 127.0.0.1 sends that name as the Host). Pages, health and the websocket alike get
403 for any other name; app/serve.py (issue 38)."""

from __future__ import annotations

import asyncio
import http.client
import inspect

import pytest

from app.serve import HostCheck, allowed_hosts, host_name, is_allowed, parse_args, typed_options
from tests.dashboard_server import SHOTS, dashboard_server, free_port

PORT = free_port()  # a fixed port collided with another file's server on another worker
WS = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}
LOOPBACK = ["localhost", "127.0.0.1", "::1"]


def _status(path: str, host: str | None, headers: dict | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
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
        for host in (f"localhost:{PORT}", f"127.0.0.1:{PORT}", f"[::1]:{PORT}", "localhost", "LocalHost."):
            assert _status("/", host) == 200, host
            assert _status("/_stcore/health", host) == 200, host
        assert _status("/_stcore/stream", f"localhost:{PORT}", WS) == 101  # the app's websocket opens
        refused = ("evil.example", f"evil.example:{PORT}", "127.0.0.1.evil.example", "localhost.evil.example")
        for host in (*refused, f"localhost:{PORT}@evil.example", "localhost:x"):
            assert _status("/", host) == 403, host
            assert _status("/_stcore/health", host) == 403, host
            assert _status("/_stcore/stream", host, WS) == 403, host
            assert _status("/static/js/nothing.js", host) == 403, host


def test_the_allowed_names():
    assert allowed_hosts(None, {}) == LOOPBACK
    assert allowed_hosts("127.0.0.1", {}) == LOOPBACK and allowed_hosts("[::1]", {}) == LOOPBACK
    assert allowed_hosts("192.168.1.7", {}) == [*LOOPBACK, "192.168.1.7"]
    assert allowed_hosts(None, {"MMC_ALLOWED_HOSTS": " Dash.Example , x.example."}) == [
        *LOOPBACK,
        "dash.example",
        "x.example",
    ]
    assert allowed_hosts("127.0.0.1", {"MMC_ALLOWED_HOSTS": "*"}) == ["*"]  # any name, on purpose
    every = allowed_hosts("0.0.0.0", {})  # every interface: its own names and any address, never any name
    assert every[:3] == LOOPBACK and "<ip>" in every and "*" not in every


@pytest.mark.parametrize(
    "header, allowed",
    [
        ("localhost:8501", True),
        ("LOCALHOST.:8501", True),
        ("127.0.0.1", True),
        ("[::1]:8501", True),
        ("evil.example", False),
        ("127.0.0.1.evil.example:8501", False),
        ("localhost.evil.example", False),
        ("localhost:8501@evil.example", False),
        ("evil.example@localhost", False),
        ("localhost:port", False),
        ("localhost/x", False),
        ("[::1", False),
        ("::1", False),  # an IPv6 address needs its brackets in a Host header
        ("", False),
        (None, False),
    ],
)
def test_a_host_header_is_read_strictly(header, allowed):
    assert is_allowed(header, LOOPBACK) is allowed


def test_bound_to_every_interface_any_address_is_answered_but_no_other_name():
    hosts = allowed_hosts("0.0.0.0", {})
    assert is_allowed("10.1.2.3:8501", hosts) and is_allowed("[fe80::1]:8501", hosts)
    assert not is_allowed("evil.example:8501", hosts) and not is_allowed("10.1.2.3.evil.example", hosts)
    assert host_name("Example.COM.:80") == "example.com"


def _call(host: bytes | None, kind: str = "http", hosts=LOOPBACK) -> list:
    """The messages HostCheck sends for one request (the app behind it answers 200 / accepts)."""
    sent: list = []

    async def app(scope, receive, send):
        if scope["type"] == "websocket":
            await send({"type": "websocket.accept"})
        else:
            await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message):
        sent.append(message)

    async def receive():
        return {}

    headers = [(b"host", host)] if host is not None else []
    asyncio.run(HostCheck(app, hosts)({"type": kind, "headers": headers}, receive, send))
    return sent


def test_the_middleware_refuses_before_the_app_sees_the_request():
    assert _call(b"localhost:8501")[0]["status"] == 200
    assert _call(b"evil.example")[0]["status"] == 403
    assert _call(None)[0]["status"] == 403  # no Host at all
    assert _call(b"localhost:8501", "websocket")[0]["type"] == "websocket.accept"
    assert _call(b"evil.example", "websocket")[0]["type"] == "websocket.close"  # sent by the server as 403


def test_the_command_line_of_mmc_dashboard():
    script, options, args = parse_args(
        ["run", "app/dashboard.py", "--server.port", "8501", "--server.headless=true", "--", "--data", "x.csv"]
    )
    assert (script, args) == ("app/dashboard.py", ["--data", "x.csv"])
    assert typed_options({**options, "server.address": "::1", "client.disableDataExport": "false"}) == {
        "server.port": 8501,
        "server.headless": True,
        "server.address": "::1",
        "client.disableDataExport": False,
    }


def test_the_streamlit_api_the_check_relies_on():
    """app/serve.py uses only Streamlit's public ASGI entry point: st.App(script, middleware=...) and
    App.run(config=...). If a release changes them, this says so (and the server test above fails)."""
    import streamlit as st

    assert "middleware" in inspect.signature(st.App).parameters
    assert "config" in inspect.signature(st.App.run).parameters
