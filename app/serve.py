"""``python -m app.serve run SCRIPT [--section.option VALUE]... [-- SCRIPT ARGS]``: the dashboard's Streamlit
server, answering only requests addressed to this machine (``mmc dashboard`` starts it; the options are
``streamlit run``'s).

Why: a page on another site can reach a server on 127.0.0.1 by DNS rebinding (its own name re-pointed to
127.0.0.1); the browser then sends that site's name as the Host header, and Streamlit answers any Host (its
``server.allowedHosts`` option checks the websocket only). Here every request (pages, static files, uploads,
health, the websocket) goes through :class:`HostCheck` first: a Host that is not one of :func:`allowed_hosts`
gets 403, and a websocket is refused before it opens (403 as well).

How: Streamlit's public ASGI entry point, ``st.App(script, middleware=[...])``, started with ``App.run(config)``
(what ``streamlit run`` does for a script that defines an ``st.App``); no Streamlit internal is touched.
tests/test_host_header.py starts the server and fails if a Streamlit release stops applying the middleware.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys

LOOPBACK = ("localhost", "127.0.0.1", "::1")
ANY_INTERFACE = ("0.0.0.0", "::")  # noqa: S104 - the names a bind to every interface uses
ENV = "MMC_ALLOWED_HOSTS"  # more names, comma-separated ("*": any name, on purpose)


def host_name(header: str | None) -> str | None:
    """The name of a Host header ("LocalHost.:8501" -> "localhost", "[::1]:8501" -> "::1"); None when it is
    missing or malformed (a port that is not a number, user info, a path, an unclosed bracket)."""
    if not header:
        return None
    h = header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        if end < 0:
            return None
        name, rest = h[1:end], h[end + 1 :]
    else:
        name, colon, port = h.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return None
    name = name.rstrip(".")
    if not name or any(c in name for c in "/@?#\\ \t"):
        return None
    return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def allowed_hosts(address: str | None = None, environ=None) -> list[str]:
    """The Host names the server answers: the loopback names; the address the server was told to bind, when
    one was set (``--server.address``, a config file, STREAMLIT_SERVER_ADDRESS); names in MMC_ALLOWED_HOSTS.
    Bound to every interface (0.0.0.0, ::) on purpose, it also answers this machine's own name and any IP
    address (``"<ip>"``): a rebinding page sends its own domain name, never an address. ``["*"]``: any name
    (MMC_ALLOWED_HOSTS=*)."""
    env = os.environ if environ is None else environ
    extra = [h.strip().lower().strip("[]").rstrip(".") for h in env.get(ENV, "").split(",") if h.strip()]
    if "*" in extra:
        return ["*"]
    hosts = list(LOOPBACK)
    if address:
        a = address.strip().lower().strip("[]")
        if a in ANY_INTERFACE:
            hosts += [n.lower() for n in (socket.gethostname(), socket.getfqdn()) if n] + ["<ip>"]
        else:
            hosts.append(a)
    for h in extra:
        if h not in hosts:
            hosts.append(h)
    return list(dict.fromkeys(hosts))


def is_allowed(header: str | None, hosts) -> bool:
    """Whether a request with this Host header is answered (see :func:`allowed_hosts`)."""
    if "*" in hosts:
        return True
    name = host_name(header)
    if name is None:
        return False
    return name in hosts or ("<ip>" in hosts and _is_ip(name))


def _configured_address() -> str | None:
    """``server.address`` when the user set it (flag, config file, environment variable), else None."""
    from streamlit import config

    if not config.is_manually_set("server.address"):
        return None
    return config.get_option("server.address") or None


class HostCheck:
    """ASGI middleware in front of every Streamlit route: a request whose Host is not allowed gets 403 (a
    websocket is closed before it is accepted, which the server sends as 403). ``hosts``: the names allowed,
    default :func:`allowed_hosts` of the configured address, computed on the first request (the server's config
    is loaded by then)."""

    def __init__(self, app, hosts=None) -> None:
        self.app = app
        self.hosts = list(hosts) if hosts is not None else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        if self.hosts is None:
            self.hosts = allowed_hosts(_configured_address())
        values = [v for k, v in scope.get("headers", ()) if k.lower() == b"host"]
        header = values[0].decode("latin-1") if len(values) == 1 else None
        if is_allowed(header, self.hosts):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = (
            b"Forbidden: this dashboard answers only requests addressed to this machine by a loopback name "
            b"(Host header). To serve other names, list them in MMC_ALLOWED_HOSTS (comma-separated).\n"
        )
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 403, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def parse_args(argv: list[str]) -> tuple[str, dict[str, str], list[str]]:
    """``run SCRIPT [--section.option VALUE | --section.option=VALUE]... [-- SCRIPT ARGS]`` -> (script, options
    as strings, script args)."""
    if len(argv) < 2 or argv[0] != "run":
        raise SystemExit("usage: python -m app.serve run SCRIPT [--section.option VALUE]... [-- SCRIPT ARGS]")
    script, rest = argv[1], argv[2:]
    options: dict[str, str] = {}
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "--":
            return script, options, rest[i + 1 :]
        if not a.startswith("--") or "." not in a:
            raise SystemExit(f"app.serve: not a Streamlit option: {a}")
        if "=" in a:
            key, value = a[2:].split("=", 1)
            i += 1
        elif i + 1 < len(rest):
            key, value = a[2:], rest[i + 1]
            i += 2
        else:
            raise SystemExit(f"app.serve: {a} needs a value")
        options[key] = value
    return script, options, []


def typed_options(options: dict[str, str]) -> dict:
    """Option values typed as a config.toml reads them unquoted: true / false, integers, decimals, else text
    (``--server.port 8501`` is the int 8501). Streamlit's own option table is not read here: parsing the config
    this early made Streamlit warn that the [server] section had changed when App.run parsed it again."""
    out: dict = {}
    for key, value in options.items():
        v = value.strip()
        if v.lower() in ("true", "false"):
            out[key] = v.lower() == "true"
        elif re.fullmatch(r"[+-]?\d+", v):
            out[key] = int(v)
        elif re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+)", v):
            out[key] = float(v)
        else:
            out[key] = value
    return out


def main(argv: list[str] | None = None) -> None:
    script, options, script_args = parse_args(list(sys.argv[1:] if argv is None else argv))
    script = os.path.abspath(script)

    import streamlit as st
    from starlette.middleware import Middleware

    config = typed_options(options)
    app = st.App(script, middleware=[Middleware(HostCheck)])
    # App.run takes the script folder and sys.argv[1:] from sys.argv, as `streamlit run SCRIPT -- ARGS` leaves them
    sys.argv = [script, *script_args]
    app.run(config=config)


if __name__ == "__main__":
    main()
