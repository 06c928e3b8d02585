"""``python -m app.serve run SCRIPT [streamlit options]``: Streamlit, with the dashboard's Host header check.

Why: a page on another site can reach a server on 127.0.0.1 by DNS rebinding (its own name re-pointed to
127.0.0.1); the browser then sends that site's name as the Host header. Streamlit answers any Host. Here its
Starlette app gets Starlette's own ``TrustedHostMiddleware`` in front of every route (pages, the websocket,
uploads, health): a request whose Host is not a loopback name (or the address the server was told to bind, or a
name in MMC_ALLOWED_HOSTS) gets 400 "Invalid host header". A server bound to every interface (0.0.0.0, ::) on
purpose cannot know its names and allows any, as before (``mmc dashboard`` warns about that address).

The one hook: ``streamlit.web.server.starlette.starlette_app.create_streamlit_middleware`` (the Streamlit-internal
middleware list, looked up when the app is built), wrapped before Streamlit starts. tests/test_host_header.py
fails if a Streamlit release moves it.
"""

from __future__ import annotations

import os
import sys

LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")
ANY_INTERFACE = ("0.0.0.0", "::", "[::]")


def allowed_hosts(address: str | None) -> list[str]:
    """The Host names the server answers: the loopback names, the bound address, MMC_ALLOWED_HOSTS (comma-
    separated); ["*"] for a server bound to every interface."""
    if address in ANY_INTERFACE:
        return ["*"]
    hosts = list(LOOPBACK)
    if address and address not in hosts:
        hosts.append(address)
    hosts += [h.strip() for h in os.environ.get("MMC_ALLOWED_HOSTS", "").split(",") if h.strip()]
    return hosts


def install_host_check(hosts: list[str]) -> None:
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from streamlit.web.server.starlette import starlette_app

    original = starlette_app.create_streamlit_middleware

    def with_host_check():
        return [Middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False), *original()]

    starlette_app.create_streamlit_middleware = with_host_check


def _address(argv: list[str]) -> str:
    for i, a in enumerate(argv):
        if a == "--server.address" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--server.address="):
            return a.split("=", 1)[1]
    return "127.0.0.1"  # .streamlit/config.toml's


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    install_host_check(allowed_hosts(_address(argv)))
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", *argv]
    streamlit_main()


if __name__ == "__main__":
    main()
