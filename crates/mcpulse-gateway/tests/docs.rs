//! Every gateway config example in docs/gateway.md (fenced as `toml gateway`) is a test: it
//! must pass the gateway's own validation, with the environment variables it names set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

#[test]
fn every_gateway_config_example_in_the_docs_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/gateway.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut checked = 0;
    let mut block: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        match &mut block {
            None if line.trim() == "```toml gateway" => block = Some((n + 1, String::new())),
            None => {}
            Some((start, body)) if line.trim() == "```" => {
                let env = |_: &str| Some("x".to_owned());
                if let Err(e) = mcpulse_gateway::config::parse(body, "docs/gateway.md", &env) {
                    panic!("the example at docs/gateway.md:{start} is invalid: {e}");
                }
                checked += 1;
                block = None;
            }
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    assert!(checked > 0, "no `toml gateway` example in docs/gateway.md");
}
