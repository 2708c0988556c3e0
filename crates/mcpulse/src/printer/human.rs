//! The summary for people. Colour only on a terminal; `NO_COLOR` respected (anstream).
//!
//! Every string a server or a file chose (names, versions, tool names, messages, evidence,
//! stderr lines, drift paths and values, the target) goes through [`mcpulse_wire::text`] before
//! it is painted: with colour on or off, nothing it holds can drive the terminal or start a line
//! of its own. Our own words and styles are the only escapes in the output.

use anstyle::{AnsiColor, Style};
use anyhow::Result;
use mcpulse_judge::{Report, Severity, Status};
use mcpulse_wire::text;

pub fn print(r: &Report, color: anstream::ColorChoice) -> Result<()> {
    super::write_stdout(render(r).as_bytes(), color)
}

fn paint(style: Style, text: &str) -> String {
    format!("{}{text}{}", style.render(), style.render_reset())
}

/// The summary, with ANSI styles (stripped by the stream when colour is off).
pub fn render(r: &Report) -> String {
    let bold = Style::new().bold();
    let dim = Style::new().dimmed();
    let (mark, style) = mark(r.status);
    let mut s = String::new();
    s.push_str(&format!(
        "{} {}  {}\n",
        paint(style, mark),
        paint(style, r.status.as_str()),
        paint(bold, &text::message(&r.target))
    ));
    let mut facts = Vec::new();
    if let Some(t) = r.transport {
        facts.push(format!("transport {t}"));
    }
    if let Some(e) = r.era {
        facts.push(format!("era {}", e.as_str()));
    }
    if let Some(v) = &r.protocol_version {
        facts.push(format!("protocol {}", text::field(v)));
    }
    if let Some(d) = r.dual_era {
        facts.push(if d {
            "dual-era".to_owned()
        } else {
            "single-era".to_owned()
        });
    }
    if !facts.is_empty() {
        s.push_str(&format!("  {}\n", facts.join(" · ")));
    }
    if let Some(server) = &r.server {
        let name = text::field(server.name.as_deref().unwrap_or("(unnamed)"));
        let version = text::field(server.version.as_deref().unwrap_or(""));
        s.push_str(&format!("  {} {name} {version}\n", paint(dim, "server")));
    }
    let mut inv = vec![format!("auth {}", r.auth.as_str())];
    if let Some(n) = r.tool_count {
        inv.push(super::count(n, "tool"));
    }
    if let Some(n) = r.prompt_count {
        inv.push(super::count(n, "prompt"));
    }
    if let Some(n) = r.resource_count {
        inv.push(super::count(n, "resource"));
    }
    s.push_str(&format!("  {}\n", inv.join(" · ")));
    let t = &r.timings_ms;
    let mut times = Vec::new();
    for (name, v) in [
        ("dns", t.dns),
        ("connect", t.connect),
        ("tls", t.tls),
        ("startup", t.startup),
        ("handshake", t.handshake),
        ("tools/list", t.tools_list),
        ("calls", t.calls),
    ] {
        if let Some(v) = v {
            times.push(format!("{name} {}", fmt_ms(v)));
        }
    }
    times.push(format!("total {}", fmt_ms(t.total)));
    s.push_str(&format!(
        "  {} {}\n",
        paint(dim, "timings"),
        times.join(" · ")
    ));
    s.push_str(&render_layers(r));
    if !r.tools.is_empty() {
        let names: Vec<std::borrow::Cow<'_, str>> =
            r.tools.iter().map(|t| text::field(&t.name)).collect();
        let shown = if names.len() > 12 {
            format!("{}, … ({} more)", names[..12].join(", "), names.len() - 12)
        } else {
            names.join(", ")
        };
        s.push_str(&format!("  {} {shown}\n", paint(dim, "tools")));
    }
    if !r.findings.is_empty() {
        s.push_str(&format!("  {}\n", paint(dim, "findings")));
        for f in &r.findings {
            let st = match f.severity {
                Severity::Critical => AnsiColor::Red.on_default().bold(),
                Severity::Warning => AnsiColor::Yellow.on_default().bold(),
                Severity::Info => AnsiColor::Blue.on_default(),
            };
            s.push_str(&format!(
                "    {} {} {}\n",
                paint(st, &format!("{:<8}", f.severity.as_str())),
                paint(bold, f.code.code()),
                text::message(&f.message)
            ));
        }
    }
    s.push_str(&render_security(r));
    if let Some(d) = &r.drift {
        s.push_str(&render_drift(d));
    }
    if r.status != Status::Healthy && !r.stderr.is_empty() {
        s.push_str(&format!("  {}\n", paint(dim, "stderr (last lines)")));
        for l in r.stderr.iter().rev().take(5).rev() {
            s.push_str(&format!("    {}\n", text::message(l)));
        }
    }
    s
}

/// The grade on one line, then each security finding with the first line of its evidence
/// (`--json` has all of it; docs/checks.md says what each code means).
/// The three layers at a glance (liveness: connect, spawn; protocol: handshake, lists;
/// dependencies: calls, health tool, health endpoint), then one line per call.
fn render_layers(r: &Report) -> String {
    let dim = Style::new().dimmed();
    let word = |st: Status| {
        let (mark, style) = mark(st);
        paint(style, &format!("{mark} {}", st.as_str()))
    };
    let layer = |st: Option<Status>| match st {
        Some(st) => word(st),
        None => paint(dim, "not checked"),
    };
    let mut s = format!(
        "  {} liveness {} · protocol {} · dependencies {}\n",
        paint(dim, "layers"),
        layer(r.layers.liveness),
        layer(r.layers.protocol),
        layer(r.layers.dependencies),
    );
    for c in &r.calls {
        let kind = match c.purpose {
            mcpulse_wire::call::CallPurpose::Synthetic => "call",
            mcpulse_wire::call::CallPurpose::HealthTool => "health tool",
        };
        let time = match (c.ms, c.refused) {
            (_, Some(_)) => "not called".to_owned(),
            (Some(ms), None) => format!("{} of {}", fmt_ms(ms), fmt_ms(c.budget_ms as f64)),
            (None, None) => "no reply".to_owned(),
        };
        let mut extra = Vec::new();
        if c.critical {
            extra.push("critical".to_owned());
        }
        if let Some(st) = c.reported {
            extra.push(format!("reports {}", st.as_str()));
        }
        extra.extend(c.findings.iter().map(|f| f.code().to_owned()));
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!(" ({})", extra.join(", "))
        };
        s.push_str(&format!(
            "    {kind} {} {} · {time}{extra}\n",
            text::field(&c.tool),
            word(c.status),
        ));
    }
    s
}

fn mark(st: Status) -> (&'static str, Style) {
    match st {
        Status::Healthy => ("✔", AnsiColor::Green.on_default().bold()),
        Status::Degraded => ("▲", AnsiColor::Yellow.on_default().bold()),
        Status::Down => ("✘", AnsiColor::Red.on_default().bold()),
    }
}

fn render_security(r: &Report) -> String {
    use mcpulse_judge::security::Level;
    let bold = Style::new().bold();
    let dim = Style::new().dimmed();
    let sec = &r.security;
    // Down for what is behind it (a critical call, its health tool) is not "did not answer".
    let unanswered = r.layers.liveness == Some(Status::Down)
        || r.layers.protocol == Some(Status::Down)
        || r.transport.is_none();
    if r.status == Status::Down && unanswered && sec.findings.is_empty() {
        // Nothing answered that could lose a point: the A of no findings would mislead.
        return format!(
            "  {} not graded (nothing to grade: the server did not answer)\n",
            paint(dim, "security")
        );
    }
    let style = match sec.grade.as_str() {
        "A" | "B" => AnsiColor::Green.on_default().bold(),
        "C" | "D" => AnsiColor::Yellow.on_default().bold(),
        _ => AnsiColor::Red.on_default().bold(),
    };
    let scope = if sec.active_checks {
        ""
    } else {
        " · extra requests skipped (--no-security)"
    };
    let mut s = format!(
        "  {} grade {} (score {}){scope}\n",
        paint(dim, "security"),
        paint(style, &sec.grade),
        sec.score
    );
    for f in &sec.findings {
        let st = match f.severity {
            Level::Critical | Level::High => AnsiColor::Red.on_default().bold(),
            Level::Medium => AnsiColor::Yellow.on_default().bold(),
            Level::Low | Level::Info => AnsiColor::Blue.on_default(),
        };
        s.push_str(&format!(
            "    {} {} {}\n",
            paint(st, &format!("{:<8}", f.severity.as_str())),
            paint(bold, f.code.code()),
            text::message(&f.message)
        ));
        if let Some(e) = f.evidence.first() {
            s.push_str(&format!(
                "             {} {}\n",
                paint(dim, "evidence"),
                text::message(e)
            ));
        }
    }
    s
}

fn fmt_ms(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2}s", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.0}ms")
    } else {
        format!("{v:.1}ms")
    }
}

/// `mcpulse diff` for people.
pub fn print_drift(d: &mcpulse_judge::drift::Drift, color: anstream::ColorChoice) -> Result<()> {
    super::write_stdout(render_drift(d).as_bytes(), color)
}

/// The drift: a headline, then one line per change with where, what, and old → new.
pub fn render_drift(d: &mcpulse_judge::drift::Drift) -> String {
    use mcpulse_judge::drift::Class;
    let bold = Style::new().bold();
    let dim = Style::new().dimmed();
    let mut s = String::new();
    let (head, style) = match d.class {
        None => ("no drift".to_owned(), AnsiColor::Green.on_default().bold()),
        Some(Class::Info) => (
            "drift: info only".to_owned(),
            AnsiColor::Green.on_default().bold(),
        ),
        Some(Class::Risky) => (
            "drift: risky".to_owned(),
            AnsiColor::Yellow.on_default().bold(),
        ),
        Some(Class::Breaking) => (
            "drift: breaking".to_owned(),
            AnsiColor::Red.on_default().bold(),
        ),
    };
    s.push_str(&format!(
        "  {}  {} breaking · {} risky · {} info  {}\n",
        paint(style, &head),
        d.breaking,
        d.risky,
        d.info,
        paint(
            dim,
            &format!("{} → {}", short(&d.baseline_digest), short(&d.digest))
        )
    ));
    if d.baseline_target != d.target {
        s.push_str(&format!(
            "  {} baseline was taken of {}, this is {}\n",
            paint(dim, "note"),
            text::message(&d.baseline_target),
            text::message(&d.target)
        ));
    }
    for m in &d.baseline_mismatches {
        s.push_str(&format!(
            "  {} the baseline's digest of {} did not match its content (--force: computed from the content)\n",
            paint(AnsiColor::Yellow.on_default().bold(), "warning"),
            text::message(&m.what)
        ));
    }
    for c in &d.changes {
        let st = match c.class {
            Class::Breaking => AnsiColor::Red.on_default().bold(),
            Class::Risky => AnsiColor::Yellow.on_default().bold(),
            Class::Info => AnsiColor::Blue.on_default(),
        };
        s.push_str(&format!(
            "    {} {} {}\n",
            paint(st, &format!("{:<8}", c.class.as_str())),
            paint(bold, &text::field(c.code.code())),
            text::message(&c.path)
        ));
        s.push_str(&format!("             {}\n", text::message(&c.message)));
        match (&c.old, &c.new) {
            (Some(o), Some(n)) => s.push_str(&format!(
                "             {} {} → {}\n",
                paint(dim, "was"),
                clip(o),
                clip(n)
            )),
            (Some(o), None) => {
                s.push_str(&format!("             {} {}\n", paint(dim, "was"), clip(o)))
            }
            (None, Some(n)) => {
                s.push_str(&format!("             {} {}\n", paint(dim, "now"), clip(n)))
            }
            (None, None) => {}
        }
    }
    s
}

/// The first 12 characters of a digest (a baseline file holds it: made inert too).
fn short(digest: &str) -> String {
    let head: String = digest
        .trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect();
    text::field(&head).into_owned()
}

/// A value as JSON, cut at 100 characters (and `…`). JSON escapes C0 controls itself; DEL, C1,
/// bidi and invisible characters it leaves raw, so the text rule applies on top.
fn clip(v: &serde_json::Value) -> String {
    text::inert(&v.to_string(), 101).into_owned()
}
