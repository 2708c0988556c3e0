//! Where the interop installs are (`scripts/interop-setup.sh` puts them in target/interop/),
//! shared by the interop tests (`interop.rs`, `supervise_interop.rs`). A missing install fails
//! the test that needs it, with the hint to run the setup; it never skips it.
#![allow(dead_code)] // each test file uses a part

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

pub const SETUP_HINT: &str = "run scripts/interop-setup.sh first: it installs the pinned third-party MCP servers into target/interop/";

pub fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/interop")
}

/// A path under target/interop/ that must exist.
pub fn installed(rel: &str) -> PathBuf {
    let p = interop_dir().join(rel);
    assert!(p.exists(), "{} is missing: {SETUP_HINT}", p.display());
    p
}

/// server-everything's entry point, run with `node`.
pub fn everything() -> String {
    path_str(installed("npm/node_modules/.bin/mcp-server-everything"))
}

/// The npm installs' node_modules (with the TypeScript SDK), for NODE_PATH.
pub fn node_modules() -> String {
    installed("npm/node_modules/@modelcontextprotocol/sdk/package.json");
    path_str(interop_dir().join("npm/node_modules"))
}

/// The Python SDK 2.x folder, for PYTHONPATH.
pub fn py2() -> String {
    installed("py2/mcp/server/mcpserver");
    path_str(interop_dir().join("py2"))
}

/// The Python SDK 1.x folder, for PYTHONPATH.
pub fn py1() -> String {
    installed("py1/mcp/server/fastmcp");
    path_str(interop_dir().join("py1"))
}

/// mcp-server-time (on the SDK 2.x), for PYTHONPATH.
pub fn pytime() -> String {
    installed("pytime/mcp_server_time");
    path_str(interop_dir().join("pytime"))
}

pub fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    assert!(p.exists(), "{} is missing", p.display());
    path_str(p)
}

pub fn path_str(p: PathBuf) -> String {
    p.to_str().expect("a UTF-8 path").to_owned()
}

/// A fresh file name under cargo's scratch folder for integration tests.
pub fn scratch(what: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!(
        "{}-{}-{what}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}
