//! The MCP endpoint (`/mcp`, Streamable HTTP, both protocol eras) and the upstreams behind it.
//! To be built (issue #19 part 1).
