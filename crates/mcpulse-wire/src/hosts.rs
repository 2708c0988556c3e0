//! `Host` and `Origin` values, as a server's DNS-rebinding guard reads them: shared by the
//! demo's HTTP servers and the gateway's front door, so that both agree on what "loopback" is.

use std::net::IpAddr;

/// The host of an `Origin` (`http://localhost:3000` → `localhost`); `None` for `null` and
/// anything without a scheme.
pub fn origin_host(origin: &str) -> Option<&str> {
    let (_, rest) = origin.split_once("://")?;
    let authority = rest.split('/').next().unwrap_or("");
    Some(host_name(authority))
}

/// The host of a `Host` header value, without the port or IPv6 brackets.
pub fn host_name(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    host.split(':').next().unwrap_or("")
}

/// `localhost`, `127.0.0.0/8` or `::1`.
pub fn is_loopback_name(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        assert_eq!(host_name("127.0.0.1:8080"), "127.0.0.1");
        assert_eq!(host_name("[::1]:80"), "::1");
        assert_eq!(host_name("localhost"), "localhost");
        assert_eq!(origin_host("http://localhost:3000"), Some("localhost"));
        assert_eq!(origin_host("https://evil.example/x"), Some("evil.example"));
        assert_eq!(origin_host("null"), None);
        for ok in ["localhost", "LOCALHOST", "127.0.0.1", "127.1.2.3", "::1"] {
            assert!(is_loopback_name(ok), "{ok}");
        }
        for bad in ["evil.example", "localhost.evil.example", "10.0.0.1", ""] {
            assert!(!is_loopback_name(bad), "{bad}");
        }
    }
}
