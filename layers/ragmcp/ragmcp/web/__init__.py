"""The HTTP app's middleware around POST /mcp and /mcp/{profile}, outermost first:

- `jsonrpc.JsonRpcErrors`: whatever goes wrong under /mcp answers in JSON-RPC;
- the MCP SDK's `RequestBodyLimitMiddleware` (RAGMCP_MAX_BODY_BYTES): 413;
- `jsonrpc.McpRequests`: known profile, header sizes, one JSON-RPC message (the `McpCall`);
- `auth.Authentication`: the API key or access token, else 401/403 (audited);
- `rate_limits.RateLimiting`: the key's limits, else -32001 (audited), and their headers on every answer.

The route then answers the `McpCall` the middleware left in the request's state. Below the app,
`connections` bounds `ragmcp serve`'s HTTP connections (header and body timeouts, a cap on open
connections, a readable 413).
"""
