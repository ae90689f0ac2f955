"""``loopwatch mcp``: a proxy in front of any MCP server (stdio or streamable HTTP).

* :mod:`.messages`: what the proxy reads of JSON-RPC (the ``tools/call`` requests, the answers
  to them, ``initialize``'s client name, cancellations) and the few messages it writes;
* :mod:`.sse`: Server-Sent Events split into events, kept byte for byte;
* :mod:`.deciders`: who decides a call (the in-process core, or a gateway) and what it says;
* :mod:`.session`: one MCP session, a loopwatch run: its calls decided, their answers reported;
* :mod:`.stdio_proxy` and :mod:`.http_proxy`: the two transports.
"""
