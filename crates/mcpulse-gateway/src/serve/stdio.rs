//! A stdio upstream: the gateway serves Streamable HTTP itself and runs one supervised child
//! (mcpulse_relay::supervise) per legacy session. To be built.
