//! Packaging (docs/packaging.md): what a distribution or a user installs beside the binary is
//! generated from, or checked against, the real thing. Shell completions and man pages come
//! from the clap definition and are run in the real shells and groff; the tools are Debian
//! packages that scripts/ci-packages.sh installs (zsh, fish, groff-base), and a missing one
//! fails the test with that hint rather than skipping it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/installs.rs"]
mod installs;
#[path = "support/servers.rs"]
mod servers;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const SETUP: &str = "run scripts/ci-packages.sh (as root) to install the pinned Debian packages";

/// Runs a program, failing the test with the setup hint when it is not installed.
fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("could not run {program}: {e}; {SETUP}"))
}

fn stdout_of(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The completion script for `shell`, written to a scratch file and parsed by that shell
/// (`shell no_exec_flag FILE`, which reads without running).
fn completion_file(shell: &str, no_exec_flag: &str) -> String {
    let script = stdout_of(BIN, &["completions", shell]);
    assert!(!script.trim().is_empty(), "no {shell} completion script");
    let path = installs::scratch(&format!("completion.{shell}"));
    std::fs::write(&path, script).unwrap();
    let path = path.to_str().unwrap().to_owned();
    let syntax = run(shell, &[no_exec_flag, &path]);
    assert!(
        syntax.status.success(),
        "{shell} {no_exec_flag}: {}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    path
}

#[test]
fn bash_completion_parses_and_completes_subcommands_and_flags() {
    let file = completion_file("bash", "-n");
    let file = file.as_str();
    // As bash calls it on <TAB>: the function named by `complete -F`, with COMP_WORDS set.
    let complete = |words: &str| -> Vec<String> {
        let script = format!(
            "source '{file}'
             COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))
             COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}
             fn=$(complete -p mcpulse | sed -n 's/.*-F \\([^ ]*\\).*/\\1/p')
             \"$fn\" mcpulse \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"
             printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        stdout_of("bash", &["-c", &script])
            .lines()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(complete("mcpulse mo"), ["monitor"]);
    let sub = complete("mcpulse ''");
    for want in [
        "probe",
        "snapshot",
        "diff",
        "monitor",
        "gateway",
        "completions",
    ] {
        assert!(sub.iter().any(|s| s == want), "{want} not offered: {sub:?}");
    }
    // Internal (hidden) commands are not offered.
    for hidden in ["supervise-watchdog", "demo-server", "docs"] {
        assert!(
            !sub.iter().any(|s| s == hidden),
            "{hidden} offered: {sub:?}"
        );
    }
    assert_eq!(complete("mcpulse probe --base"), ["--baseline"]);
    assert_eq!(complete("mcpulse completions z"), ["zsh"]);
}

#[test]
fn zsh_completion_parses_and_defines_the_function() {
    let file = completion_file("zsh", "-n");
    let file = file.as_str();
    // Loaded the way compinit autoloads a site-functions file: it must define _mcpulse.
    let script =
        format!("autoload -Uz compinit && compinit -u -D; source '{file}'; whence -w _mcpulse");
    let out = stdout_of("zsh", &["-f", "-c", &script]);
    assert!(out.contains("_mcpulse: function"), "{out}");
    let text = std::fs::read_to_string(file).unwrap();
    assert!(
        text.starts_with("#compdef mcpulse"),
        "{}",
        &text[..40.min(text.len())]
    );
    assert!(
        text.contains("'gateway:") && !text.contains("watchdog"),
        "{text}"
    );
}

#[test]
fn fish_completion_parses_and_completes_a_subcommand() {
    let file = completion_file("fish", "--no-execute");
    let file = file.as_str();
    let script = format!("source '{file}'; complete -C 'mcpulse mo'");
    let out = stdout_of("fish", &["--no-config", "-c", &script]);
    let first: Vec<&str> = out.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(first, ["monitor"], "{out}");
    let script = format!("source '{file}'; complete -C 'mcpulse '");
    let all = stdout_of("fish", &["--no-config", "-c", &script]);
    assert!(all.lines().any(|l| l.starts_with("gateway\t")), "{all}");
    assert!(
        !all.contains("watchdog") && !all.contains("demo-server"),
        "{all}"
    );
}

/// groff's warnings (`-ww`) are errors here: a page that renders with them looks broken in `man`.
fn assert_renders_cleanly(page: &Path) {
    let out = run(
        "groff",
        &["-man", "-Tutf8", "-ww", "-z", page.to_str().unwrap()],
    );
    assert!(out.status.success(), "groff failed on {}", page.display());
    assert!(
        out.stderr.is_empty(),
        "groff warns on {}:\n{}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn man_pages_render_without_warnings() {
    // `mcpulse man` to stdout: the top-level page.
    let page = installs::scratch("mcpulse.1");
    std::fs::write(&page, stdout_of(BIN, &["man"])).unwrap();
    assert_renders_cleanly(&page);
    let text = stdout_of("groff", &["-man", "-Tutf8", page.to_str().unwrap()]);
    assert!(text.contains("mcpulse-probe(1)"), "{text}");
    // Every command listed has a page: no `mcpulse-help(1)`, no hidden ones.
    assert!(
        !text.contains("mcpulse-help(1)") && !text.contains("watchdog"),
        "{text}"
    );

    // `mcpulse man --out-dir`: one page per visible command, as a package installs them.
    let dir = installs::scratch("man1");
    stdout_of(BIN, &["man", "--out-dir", dir.to_str().unwrap()]);
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    for want in [
        "mcpulse.1",
        "mcpulse-probe.1",
        "mcpulse-monitor.1",
        "mcpulse-gateway.1",
    ] {
        assert!(pages.iter().any(|p| p == want), "{want} missing: {pages:?}");
    }
    assert!(!pages.iter().any(|p| p.contains("watchdog")), "{pages:?}");
    for p in &pages {
        assert_renders_cleanly(&dir.join(p));
    }
    // A command's page documents its flags.
    let probe = stdout_of(
        "groff",
        &[
            "-man",
            "-Tutf8",
            dir.join("mcpulse-probe.1").to_str().unwrap(),
        ],
    );
    assert!(probe.contains("--baseline"), "{probe}");
}

// ---------------------------------------------------------------------------------------------
// scripts/ci-packages.sh

/// A Debian 12.12 machine as ci-packages.sh sees it through dpkg-query and apt-cache (stand-ins
/// on PATH): libsystemd0 252.39-1~deb12u2 is installed (apt depends on it), the archive offers
/// that systemd and, in bookworm-security, the older 252.38-1~deb12u1. systemd must be taken at
/// libsystemd0's version: the older one cannot be installed beside it.
#[test]
fn ci_packages_takes_systemd_at_the_installed_libsystemd0_version() {
    use std::os::unix::fs::PermissionsExt;
    let dir = installs::scratch("ci-packages");
    std::fs::create_dir_all(&dir).unwrap();
    let fake = |name: &str, body: &str| {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    fake(
        "dpkg-query",
        r#"for a; do pkg="$a"; done
case "$pkg" in libsystemd0) printf 'install ok installed 252.39-1~deb12u2' ;; *) exit 1 ;; esac"#,
    );
    fake(
        "apt-cache",
        r#"pkg="$2"
case "$1:$pkg" in
  policy:systemd) echo "  Candidate: 252.39-1~deb12u2" ;;
  madison:systemd) echo " systemd | 252.39-1~deb12u2 | x"; echo " systemd | 252.38-1~deb12u1 | y" ;;
  policy:*) echo "  Candidate: 0-0" ;;
  madison:*) ;;
esac"#,
    );
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
    let out = Command::new("bash")
        .arg(repo().join("scripts/ci-packages.sh"))
        .arg("--plan")
        .env("PATH", path)
        .output()
        .unwrap();
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.lines().any(|l| l == "systemd=252.39-1~deb12u2"),
        "plan:\n{plan}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// systemd units (deploy/systemd/)

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn units() -> Vec<PathBuf> {
    let mut units: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/systemd"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    units.sort();
    units
}

/// `systemd-analyze verify` on a copy of `unit` whose ExecStart names this build's binary (the
/// unit says /usr/local/bin/mcpulse), with the man pages of `Documentation=man:` on MANPATH.
/// Returns everything it printed: a clean unit prints nothing.
fn verify(name: &str, unit: &str) -> (bool, String) {
    let dir = installs::scratch("systemd");
    let man1 = dir.join("man/man1");
    std::fs::create_dir_all(&man1).unwrap();
    stdout_of(BIN, &["man", "--out-dir", man1.to_str().unwrap()]);
    let file = dir.join(name);
    std::fs::write(&file, unit.replace("/usr/local/bin/mcpulse", BIN)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", file.to_str().unwrap()])
        .env("MANPATH", dir.join("man"))
        .output()
        .unwrap_or_else(|e| panic!("could not run systemd-analyze: {e}; {SETUP}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn systemd_units_verify_cleanly_and_are_hardened() {
    let units = units();
    let names: Vec<String> = units
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        ["mcpulse-gateway.service", "mcpulse-monitor.service"]
    );
    for (path, name) in units.iter().zip(&names) {
        let unit = std::fs::read_to_string(path).unwrap();
        let (ok, said) = verify(name, &unit);
        assert!(
            ok && said.is_empty(),
            "systemd-analyze verify {name}:\n{said}"
        );

        let lines: Vec<&str> = unit.lines().map(str::trim).collect();
        for want in [
            "DynamicUser=yes",
            "ProtectSystem=strict",
            "ProtectHome=yes",
            "PrivateTmp=yes",
            "NoNewPrivileges=yes",
            "CapabilityBoundingSet=",
            "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
            "SystemCallFilter=@system-service",
            "LockPersonality=yes",
            "RestrictNamespaces=yes",
            // SIGTERM to mcpulse alone: it stops its children's process groups itself.
            "KillMode=mixed",
        ] {
            assert!(lines.contains(&want), "{name} lacks {want}");
        }
        // Node's JIT dies under it (mdwe_stops_node_but_not_mcpulse).
        assert!(!lines.contains(&"MemoryDenyWriteExecute=yes"), "{name}");

        // systemd's own exposure score (0 safest, 10 unprotected); 1.4 when written.
        let dir = installs::scratch("security");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(name);
        std::fs::write(&file, unit.replace("/usr/local/bin/mcpulse", BIN)).unwrap();
        let out = stdout_of(
            "systemd-analyze",
            &[
                "security",
                "--offline=true",
                "--no-pager",
                file.to_str().unwrap(),
            ],
        );
        let score: f64 = out
            .lines()
            .find_map(|l| l.split("Overall exposure level for ").nth(1))
            .and_then(|rest| rest.split(": ").nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no exposure level in:\n{out}"));
        assert!(score <= 2.0, "{name}: exposure {score}");
    }
    assert!(
        std::fs::read_to_string(repo().join("deploy/systemd/mcpulse-monitor.service"))
            .unwrap()
            .contains("StateDirectory=mcpulse\n")
    );

    // The check sees a mistake: a misspelt value is reported, so a clean run means something.
    let broken = std::fs::read_to_string(&units[0])
        .unwrap()
        .replace("ProtectSystem=strict", "ProtectSystem=stirct");
    let (_, said) = verify(&names[0], &broken);
    assert!(said.contains("stirct"), "a broken unit passed: {said}");
}

/// The audit architecture of this build, for the seccomp filter's first check.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// The seccomp filter systemd 252 installs for MemoryDenyWriteExecute=yes (on every kernel):
/// mmap asking for writable and executable memory at once, and mprotect / pkey_mprotect
/// asking for executable memory, fail with EPERM. Other architectures are let through.
fn mdwe_seccomp_filter() -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_ALU, BPF_AND, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (BPF_JMP | BPF_JEQ | BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ld = |offset: u32| stmt(BPF_LD | BPF_W | BPF_ABS, offset);
    let allow = stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW);
    let deny = stmt(
        BPF_RET | BPF_K,
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
    );
    // struct seccomp_data: nr at 0, arch at 4, args[] (u64 each) from 16; prot is args[2], whose
    // low half (little endian) is at 32.
    let (wx, x) = (
        (libc::PROT_WRITE | libc::PROT_EXEC) as u32,
        libc::PROT_EXEC as u32,
    );
    vec![
        /* 0 */ ld(4),
        /* 1 */ jeq(AUDIT_ARCH, 0, 11), // other arch -> 13 allow
        /* 2 */ ld(0),
        /* 3 */ jeq(libc::SYS_mmap as u32, 3, 0), // -> 7
        /* 4 */ jeq(libc::SYS_mprotect as u32, 5, 0), // -> 10
        /* 5 */ jeq(libc::SYS_pkey_mprotect as u32, 4, 0), // -> 10
        /* 6 */ allow,
        /* 7 */ ld(32),
        /* 8 */ stmt(BPF_ALU | BPF_AND | BPF_K, wx),
        /* 9 */ jeq(wx, 4, 3), // -> 14 deny, 13 allow
        /* 10 */ ld(32),
        /* 11 */ stmt(BPF_ALU | BPF_AND | BPF_K, x),
        /* 12 */ jeq(x, 1, 0), // -> 14 deny, 13 allow
        /* 13 */ allow,
        /* 14 */ deny,
    ]
}

/// How a child is kept from making memory executable.
#[derive(Clone, Copy, Debug)]
enum Mdwe {
    /// systemd 252's seccomp filter (what the units would get on Debian 12).
    Seccomp,
    /// The kernel's prctl PR_SET_MDWE (Linux 6.3 and later; newer systemd uses it).
    Prctl,
}

const PR_SET_MDWE: libc::c_int = 65;
const PR_MDWE_REFUSE_EXEC_GAIN: libc::c_ulong = 1;

/// Whether this kernel has PR_SET_MDWE: PR_GET_MDWE (66) answers EINVAL before Linux 6.3.
fn kernel_has_prctl_mdwe() -> bool {
    // SAFETY: PR_GET_MDWE only reads this process's flags; the unused arguments must be 0.
    #[allow(unsafe_code)]
    let got = unsafe { libc::prctl(66, 0, 0, 0, 0) };
    got >= 0
}

/// MemoryDenyWriteExecute=yes is left out of the units because of this: under it (systemd 252's
/// seccomp filter, and the kernel's prctl PR_SET_MDWE where the kernel has it; both inherited
/// across exec) node aborts as soon as V8 compiles, while mcpulse itself and Python run.
#[test]
fn mdwe_stops_node_but_not_mcpulse() {
    fn under(mdwe: Mdwe, program: &str, args: &[&str]) -> std::process::ExitStatus {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let filter = mdwe_seccomp_filter();
        // The closure must be Send + Sync: it carries the filter's address, not a pointer.
        let (len, addr) = (filter.len() as u16, filter.as_ptr() as usize);
        // SAFETY: prctl(2) in the forked child before exec: no allocation, no lock; `prog`
        // points into `filter`, alive until `status()` returns, and the kernel copies it.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || {
                let done = match mdwe {
                    Mdwe::Prctl => libc::prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0),
                    Mdwe::Seccomp => {
                        let prog = libc::sock_fprog {
                            len,
                            filter: addr as *mut libc::sock_filter,
                        };
                        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        libc::prctl(
                            libc::PR_SET_SECCOMP,
                            libc::SECCOMP_MODE_FILTER,
                            &raw const prog,
                        )
                    }
                };
                if done != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("could not run {program} under {mdwe:?}: {e}"));
        drop(filter);
        status
    }
    let mut kinds = vec![Mdwe::Seccomp];
    if kernel_has_prctl_mdwe() {
        kinds.push(Mdwe::Prctl);
    } else {
        eprintln!(
            "NOTE: this kernel lacks prctl PR_SET_MDWE (Linux < 6.3, e.g. Debian 12's 6.1): \
             MDWE is checked with systemd 252's seccomp filter only"
        );
    }
    for mdwe in kinds {
        assert!(under(mdwe, BIN, &["--version"]).success(), "{mdwe:?}");
        let python = under(mdwe, "python3", &["-c", "print(sum(range(10**6)))"]);
        assert!(python.success(), "{mdwe:?}");
        let node = under(
            mdwe,
            "node",
            &[
                "-e",
                "let s = 0; for (let i = 0; i < 1e7; i++) s += i; console.log(s)",
            ],
        );
        assert!(
            !node.success(),
            "node ran under {mdwe:?}: the units could set MemoryDenyWriteExecute"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Grafana dashboard (deploy/grafana/mcpulse.json)

/// Every PromQL expression in the dashboard: the panels' queries (rows included) and the
/// template variables' `label_values(metric, label)`, as (where, expr).
fn dashboard_exprs(dash: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(panels: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("?");
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{title}: no expr"));
                out.push((format!("panel {title:?}"), expr.to_owned()));
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    for v in dash["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            let q = v["query"]["query"].as_str().unwrap();
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.split(',').next())
                .unwrap_or_else(|| panic!("variable {}: {q}", v["name"]));
            out.push((format!("variable {}", v["name"]), inner.trim().to_owned()));
        }
    }
    out
}

/// The expression with Grafana's variables given values Prometheus accepts.
fn without_grafana_variables(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__range", "1h")
        .replace("$target", ".*")
        .replace("$probe_job", ".*")
        .replace("$gateway", ".*")
}

/// The metric names a PromQL expression selects: identifiers that are not functions (followed
/// by `(`), keywords, label names (inside `{...}` or `by (...)`), strings, numbers or durations.
fn metric_names(expr: &str) -> Vec<String> {
    // Keywords, and aggregations (which may be followed by `by (...)` before their `(`).
    const KEYWORDS: &str = "by without on ignoring group_left group_right bool and or unless \
        offset inf nan sum min max avg group stddev stdvar count count_values bottomk topk \
        quantile limitk limit_ratio";
    let b = expr.as_bytes();
    let mut names = Vec::new();
    let mut i = 0;
    let mut skip_group = false; // after by/without/on/ignoring: the next (...) holds labels
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == b'{' || c == b'[' || (c == b'(' && skip_group) {
            let close = match c {
                b'{' => b'}',
                b'[' => b']',
                _ => b')',
            };
            skip_group = false;
            while i < b.len() && b[i] != close {
                if b[i] == b'"' {
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        i += 1;
                    }
                }
                i += 1;
            }
            i += 1;
        } else if c.is_ascii_digit() || c == b'.' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b':' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            let word = &expr[start..i];
            let next = expr[i..].trim_start();
            if [
                "by",
                "without",
                "on",
                "ignoring",
                "group_left",
                "group_right",
            ]
            .contains(&word)
            {
                skip_group = true;
            } else if !next.starts_with('(')
                && !KEYWORDS
                    .split_whitespace()
                    .any(|k| k.eq_ignore_ascii_case(word))
            {
                names.push(word.to_owned());
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The metric names an exposition declares or samples: `# TYPE` names (a histogram's with
/// `_bucket`, `_sum` and `_count`, a counter's with `_total`) and every sample's name.
fn exposed_names(text: &str, into: &mut std::collections::BTreeSet<String>) {
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            let (name, kind) = (it.next().unwrap(), it.next().unwrap_or(""));
            into.insert(name.to_owned());
            let suffixes: &[&str] = match kind {
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["_sum", "_count"],
                "counter" => &["_total"],
                _ => &[],
            };
            for s in suffixes {
                into.insert(format!("{name}{s}"));
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            into.insert(line[..end].to_owned());
        }
    }
}

#[test]
fn promql_metric_names_are_found() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.95, sum by (le, method) (rate(a_bucket{x=~"$g", y="b{c}"}[5m])))"#
        ),
        ["a_bucket"]
    );
    assert_eq!(
        metric_names(
            "2 * max by (target) (m1{s=\"down\"}) + m2 or vector(0) - time() + m3 offset 5m"
        ),
        ["m1", "m2", "m3"]
    );
    assert_eq!(
        metric_names("count(up == 1) / on (job) group_left (x) y"),
        ["up", "y"]
    );
}

/// A process we started, stopped with SIGTERM (so it stops its own children as a user's
/// Ctrl-C would), then checked to have left none of its children behind.
fn stop_gracefully(mut server: servers::Server) {
    let pid = server.child.id();
    let children: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().nth(1))
                    == Some(pid.to_string().as_str())
            })
        })
        .collect();
    // SAFETY: kill(2) on the pid of our own child; no memory is touched.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(i32::try_from(pid).unwrap(), libc::SIGTERM) };
    assert_eq!(rc, 0);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while server.child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < until,
            "{} ignored SIGTERM",
            server.name
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    for c in children {
        while Path::new(&format!("/proc/{c}")).exists()
            && !std::fs::read_to_string(format!("/proc/{c}/stat")).is_ok_and(|s| s.contains(") Z "))
        {
            assert!(
                std::time::Instant::now() < until,
                "{}'s child {c} outlived it",
                server.name
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    drop(server);
}

/// Fetches `path` until `ready` accepts the body (the first checks take a moment).
async fn scrape_until(port: u16, path: &str, ready: impl Fn(&str) -> bool) -> String {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = mcpulse_testkit::http::get(addr, path).await;
        if r.status == 200 && ready(&r.body) {
            return r.body;
        }
        assert!(
            std::time::Instant::now() < until,
            "{path} never got ready: {} {}",
            r.status,
            r.body
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn grafana_dashboard_queries_only_series_mcpulse_exposes() {
    let path = repo().join("deploy/grafana/mcpulse.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // Importable: a current schema, the data source as an import input used everywhere.
    assert_eq!(dash["schemaVersion"], 39);
    assert_eq!(dash["__inputs"][0]["name"], "DS_PROMETHEUS");
    let text = dash.to_string();
    assert!(
        !text.contains("\"uid\":\"prometheus\""),
        "a hard-wired data source"
    );
    let exprs = dashboard_exprs(&dash);
    assert!(exprs.len() > 30, "{}", exprs.len());
    // Laid out: every panel within the 24 columns, none over another.
    let mut cells = std::collections::BTreeSet::new();
    for p in dash["panels"].as_array().unwrap() {
        let g = &p["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_u64().unwrap());
        assert!(x + w <= 24, "{} is off the grid", p["title"]);
        for cell in (y..y + h).flat_map(|r| (x..x + w).map(move |c| (r, c))) {
            assert!(cells.insert(cell), "{} overlaps another panel", p["title"]);
        }
    }

    // The /probe panels aggregate the probers away (deploy/prometheus/prometheus-shard.yml
    // scrapes every server through two monitors, labels `prober` and `monitor`): one line per
    // server.
    for (at, e) in &exprs {
        if e.contains("probe_") && !e.contains("mcpulse_") && !at.starts_with("variable") {
            assert!(
                e.contains("without (prober, monitor)"),
                "{at}: a /probe query that shows each server once per prober: {e}"
            );
        }
    }

    // Every expression is valid PromQL, to Prometheus's own parser (promtool, Debian's
    // prometheus package): each is checked as a recording rule.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (n, (_, e)) in exprs.iter().enumerate() {
        let e = serde_json::to_string(&without_grafana_variables(e)).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard:expr{n}\n        expr: {e}\n"
        ));
    }
    let file = installs::scratch("dashboard-rules.yml");
    std::fs::write(&file, rules).unwrap();
    let out = run("promtool", &["check", "rules", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "promtool rejects a dashboard expression:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // What the real binaries expose: a running demo's /metrics and /probe, and a running
    // gateway's /metrics with a dependency check configured (its series exist only then).
    let mut exposed = std::collections::BTreeSet::new();
    let demo = servers::Server::start("demo", |port| {
        let mut c = Command::new(BIN);
        c.args(["demo", "--listen", &format!("127.0.0.1:{port}")]);
        c
    });
    let metrics = scrape_until(demo.port, "/metrics", |b| {
        b.contains("mcpulse_security_grade{") && b.contains("mcpulse_protocol_info{")
    })
    .await;
    exposed_names(&metrics, &mut exposed);
    let probe = scrape_until(demo.port, "/probe?target=healthy-modern", |b| {
        b.contains("probe_mcp_status{")
    })
    .await;
    exposed_names(&probe, &mut exposed);

    let config = installs::scratch("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[upstream]\ncommand = [{BIN:?}, \"demo-server\", \"stdio\"]\n\n\
             [[checks]]\nname = \"demo-api\"\nkind = \"tcp\"\ntarget = \"127.0.0.1:{}\"\n",
            demo.port
        ),
    )
    .unwrap();
    let gateway = servers::Server::start("gateway", |port| {
        let mut c = Command::new(BIN);
        c.args([
            "gateway",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
        ])
        .arg(&config);
        c
    });
    // Traffic, so that the per-method series have samples: a real probe through the gateway.
    let probed = run(BIN, &["probe", &gateway.url("/mcp")]);
    assert_eq!(probed.status.code(), Some(0), "{probed:?}");
    let gw = scrape_until(gateway.port, "/metrics", |b| {
        b.contains("mcpulse_gateway_check_duration_seconds{")
            && b.contains("mcpulse_gateway_request_duration_seconds_bucket{")
    })
    .await;
    exposed_names(&gw, &mut exposed);
    stop_gracefully(gateway);
    stop_gracefully(demo);

    let mut missing = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    for (at, e) in &exprs {
        for name in metric_names(e) {
            if !exposed.contains(&name) {
                missing.push(format!("{at}: {name} in {e}"));
            }
            used.insert(name);
        }
    }
    assert!(
        missing.is_empty(),
        "not exposed by mcpulse:\n{}",
        missing.join("\n")
    );
    // The areas the dashboard is for each have a series.
    for want in [
        "mcpulse_target_status",
        "mcpulse_probe_phase_duration_seconds",
        "mcpulse_security_grade",
        "mcpulse_contract_hash",
        "mcpulse_open_incidents",
        "probe_mcp_phase_duration_seconds",
        "mcpulse_gateway_requests_total",
        "mcpulse_gateway_request_duration_seconds_bucket",
        "mcpulse_gateway_readiness_status",
        "mcpulse_gateway_check_status",
    ] {
        assert!(used.contains(want), "no panel queries {want}");
    }
    // The check would see a misspelt series.
    assert!(!exposed.contains("mcpulse_gateway_request_total"));
}

// ---------------------------------------------------------------------------------------------
// The drift gate (docs/ci-gate.md, deploy/ci/github-actions-drift-gate.yml)

/// The lines of the fenced block of docs/ci-gate.md whose info string is `sh TAG`.
fn ci_gate_block(doc: &str, tag: &str) -> Vec<String> {
    let fence = format!("```sh {tag}");
    let mut lines = doc.lines().skip_while(|l| l.trim() != fence).skip(1);
    let block: Vec<String> = lines
        .by_ref()
        .take_while(|l| l.trim() != "```")
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    assert!(!block.is_empty(), "no `{fence}` block in docs/ci-gate.md");
    block
}

/// A contract for the scripted server (tests/fixtures/contract_server.sh): `search` (read-only
/// or not, with the `required` parameters) and, `with_fetch`, a second tool.
fn contract(read_only: bool, with_fetch: bool, required: &[&str]) -> serde_json::Value {
    let mut tools = vec![serde_json::json!({
        "name": "search", "description": "Search the index.",
        "annotations": {"readOnlyHint": read_only},
        "inputSchema": {"type": "object",
            "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
            "required": required}
    })];
    if with_fetch {
        tools.push(serde_json::json!({"name": "fetch", "inputSchema": {"type": "object"}}));
    }
    serde_json::Value::Array(tools)
}

#[test]
fn ci_gate_recipe_runs_as_documented() {
    let doc = std::fs::read_to_string(repo().join("docs/ci-gate.md")).unwrap();
    let dir = installs::scratch("ci-gate");
    std::fs::create_dir_all(&dir).unwrap();
    // ./my-server, as the doc calls it: a stdio server whose tools come from tools.json.
    let fixture = repo().join("crates/mcpulse/tests/fixtures/contract_server.sh");
    let server = dir.join("my-server");
    std::fs::write(
        &server,
        format!(
            "#!/bin/sh\nexec sh '{}' \"$(dirname \"$0\")/tools.json\"\n",
            fixture.display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&server).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&server, perms).unwrap();
    let serve = |tools: serde_json::Value| {
        std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    };
    // `mcpulse` on PATH, as after an install.
    let path = format!(
        "{}:{}",
        Path::new(BIN).parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let shell = |flags: &str, script: &str| -> (i32, String) {
        let out = Command::new("bash")
            .args([flags, script])
            .current_dir(&dir)
            .env("PATH", &path)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), said)
    };
    // Each line of a block on its own, as a CI step or a person runs it: the exit codes.
    let codes = |tag: &str| -> Vec<i32> {
        ci_gate_block(&doc, tag)
            .iter()
            .map(|line| {
                let (code, said) = shell("-c", line);
                assert!(code != 3, "`{line}` could not run:\n{said}");
                code
            })
            .collect()
    };

    // 1. The baseline.
    serve(contract(true, true, &["q"]));
    assert_eq!(codes("baseline"), [0]);
    assert!(dir.join("mcp.lock").exists());

    // 2. Unchanged: the gate passes.
    assert_eq!(codes("gate"), [0]);
    assert_eq!(codes("gate-diff"), [0, 0]);
    // Info only (a tool added): passes.
    serve(
        contract(true, true, &["q"])
            .as_array()
            .unwrap()
            .iter()
            .cloned()
            .chain([serde_json::json!({"name": "crawl", "inputSchema": {"type": "object"}})])
            .collect(),
    );
    assert_eq!(codes("gate"), [0]);
    // Risky: readOnlyHint flipped.
    serve(contract(false, true, &["q"]));
    assert_eq!(codes("gate"), [1]);
    assert_eq!(codes("gate-diff"), [0, 1]);
    // Breaking: a tool removed.
    serve(contract(true, false, &["q"]));
    assert_eq!(codes("gate"), [2]);
    assert_eq!(codes("gate-diff"), [0, 2]);

    // The workflow's gate step, run as GitHub runs a `run:` (bash -e), fails the same way and
    // leaves the JSON report for its artifact.
    let workflow = repo().join("deploy/ci/github-actions-drift-gate.yml");
    let json = stdout_of(
        "/usr/bin/python3",
        &[
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
            workflow.to_str().unwrap(),
        ],
    );
    let wf: serde_json::Value = serde_json::from_str(&json).unwrap();
    let steps = wf["jobs"]["drift-gate"]["steps"].as_array().unwrap();
    let gate_step = steps
        .iter()
        .find(|s| s["name"] == "Drift gate")
        .and_then(|s| s["run"].as_str())
        .unwrap();
    for line in gate_step
        .lines()
        .filter(|l| l.trim_start().starts_with("mcpulse "))
    {
        let cmd = line
            .trim()
            .split(" >")
            .next()
            .unwrap()
            .split(" ||")
            .next()
            .unwrap();
        let cmd = cmd.replace(" --json", "");
        assert!(
            doc.contains(&cmd),
            "the workflow runs `{cmd}`, which docs/ci-gate.md does not show"
        );
    }
    let (code, said) = shell("-ec", gate_step);
    assert_eq!(code, 2, "{said}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("drift.json")).unwrap()).unwrap();
    assert_eq!(report["class"], "breaking", "{report}");

    // 3. Accepting the reviewed change: the gate passes again.
    let _ = codes("accept");
    assert_eq!(codes("gate"), [0]);
    // A parameter made required (breaking), accepted from a snapshot.
    serve(contract(true, false, &["q", "limit"]));
    assert_eq!(codes("gate-diff"), [0, 2]);
    assert_eq!(codes("accept-diff"), [0]);
    assert_eq!(codes("gate"), [0]);
    let (code, said) = shell("-ec", gate_step);
    assert_eq!(code, 0, "{said}");
}
