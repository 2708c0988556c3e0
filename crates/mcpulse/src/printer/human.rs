//! The summary for people. Colour only on a terminal; `NO_COLOR` respected (anstream).

use anstyle::{AnsiColor, Style};
use anyhow::Result;
use mcpulse_judge::{Report, Severity, Status};
use std::io::Write;

pub fn print(r: &Report, color: anstream::ColorChoice) -> Result<()> {
    let mut out = anstream::AutoStream::new(std::io::stdout().lock(), color);
    let s = render(r);
    out.write_all(s.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn paint(style: Style, text: &str) -> String {
    format!("{}{text}{}", style.render(), style.render_reset())
}

/// The summary, with ANSI styles (stripped by the stream when colour is off).
pub fn render(r: &Report) -> String {
    let bold = Style::new().bold();
    let dim = Style::new().dimmed();
    let (mark, style) = match r.status {
        Status::Healthy => ("✔", AnsiColor::Green.on_default().bold()),
        Status::Degraded => ("▲", AnsiColor::Yellow.on_default().bold()),
        Status::Down => ("✘", AnsiColor::Red.on_default().bold()),
    };
    let mut s = String::new();
    s.push_str(&format!(
        "{} {}  {}\n",
        paint(style, mark),
        paint(style, r.status.as_str()),
        paint(bold, &r.target)
    ));
    let mut facts = Vec::new();
    if let Some(t) = r.transport {
        facts.push(format!("transport {t}"));
    }
    if let Some(e) = r.era {
        facts.push(format!("era {}", e.as_str()));
    }
    if let Some(v) = &r.protocol_version {
        facts.push(format!("protocol {v}"));
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
        let name = server.name.as_deref().unwrap_or("(unnamed)");
        let version = server.version.as_deref().unwrap_or("");
        s.push_str(&format!("  {} {name} {version}\n", paint(dim, "server")));
    }
    let mut inv = vec![format!(
        "auth {}",
        match r.auth {
            mcpulse_judge::report::AuthPosture::None => "none",
            mcpulse_judge::report::AuthPosture::Required => "required",
            mcpulse_judge::report::AuthPosture::Forbidden => "forbidden",
        }
    )];
    if let Some(n) = r.tool_count {
        inv.push(format!("{n} tools"));
    }
    if let Some(n) = r.prompt_count {
        inv.push(format!("{n} prompts"));
    }
    if let Some(n) = r.resource_count {
        inv.push(format!("{n} resources"));
    }
    s.push_str(&format!("  {}\n", inv.join(" · ")));
    let t = &r.timings_ms;
    let mut times = Vec::new();
    for (name, v) in [
        ("dns", t.dns),
        ("connect", t.connect),
        ("tls", t.tls),
        ("handshake", t.handshake),
        ("tools/list", t.tools_list),
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
    if !r.tools.is_empty() {
        let names: Vec<&str> = r.tools.iter().map(|t| t.name.as_str()).collect();
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
                "    {:<8} {} {}\n",
                paint(st, f.severity.as_str()),
                paint(bold, &f.code),
                f.message
            ));
        }
    }
    if r.status != Status::Healthy && !r.stderr.is_empty() {
        s.push_str(&format!("  {}\n", paint(dim, "stderr (last lines)")));
        for l in r.stderr.iter().rev().take(5).rev() {
            s.push_str(&format!("    {l}\n"));
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
