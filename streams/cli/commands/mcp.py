"""``loopwatch mcp``: a proxy in front of an MCP server (stdio or streamable HTTP)."""

from __future__ import annotations

import argparse
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.cli.flags import config_flag, positive_int


def cmd_mcp(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.mcp.command import run_mcp

    return run_mcp(args, err)


def register(sub: Any) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="a proxy in front of an MCP server: every tools/call is checked for loops first",
        description="Put loopwatch in front of any MCP server: prefix the server's command in "
        "the client's config (stdio), or point the client at the proxy (streamable HTTP). "
        "Every tools/call is decided before it reaches the server (in-process, or by a gateway "
        "with --gateway): a blocked call is answered with a tool error holding loopwatch's "
        "reason, an abort refuses every later call of the session, a warning is appended to "
        "the result the model reads. Every other message goes through unchanged. A session is "
        "a run; its agent is the client's name from initialize.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  loopwatch mcp -- npx -y @modelcontextprotocol/server-filesystem /srv\n"
        "  loopwatch mcp --config loopwatch.json -- python my_server.py\n"
        "  loopwatch mcp --gateway http://127.0.0.1:6070 -- npx -y @modelcontextprotocol/server-everything\n"
        "  loopwatch mcp --upstream http://127.0.0.1:3001/mcp --listen 127.0.0.1:6071\n"
        "see docs/mcp.md for Claude Desktop, Claude Code and Cursor",
    )
    mcp.add_argument(
        "server", nargs="*", metavar="-- COMMAND [ARG ...]", help="the stdio MCP server's command, after --"
    )
    mcp.add_argument("--upstream", metavar="URL", help="a streamable HTTP MCP server's endpoint URL")
    mcp.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="with --upstream: where the proxy serves the same endpoint path (default 127.0.0.1:6071)",
    )
    mcp.add_argument(
        "--gateway",
        metavar="URL",
        help="decide through a running loopwatch gateway (token: env LOOPWATCH_GATEWAY_TOKEN); "
        "default: in-process, with --config",
    )
    mcp.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=2000,
        help="with --gateway: how long a decision may take before the call goes on (default 2000)",
    )
    mcp.add_argument(
        "--fail-closed",
        action="store_true",
        help="with --gateway: refuse calls when the gateway cannot be asked (default: let them through)",
    )
    mcp.add_argument("--agent-id", metavar="NAME", help="the runs' agent (default: the client's name)")
    mcp.add_argument(
        "--allowed-origins",
        metavar="ORIGINS",
        help="with --upstream: comma-separated web origins allowed besides loopback ones (any other "
        "Origin answers 403)",
    )
    mcp.add_argument(
        "--allowed-hosts",
        metavar="NAMES",
        help="with --upstream: comma-separated host names served besides the listen address and "
        "loopback (a foreign Host answers 421)",
    )
    mcp.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="with --upstream: listen beyond loopback without LOOPWATCH_GATEWAY_TOKENS",
    )
    config_flag(mcp, "the in-process core's config file (JSON5, OpenClaw-style) (env LOOPWATCH_CONFIG)")
    mcp.set_defaults(func=cmd_mcp)
