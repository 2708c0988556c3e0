//! What only a stdio server shows: its processes' start-up and the handshake's own latency,
//! a session process that exited on its own, stdout noise and stderr. It does not judge a
//! process that never completed a handshake (`down`).

use super::Judgement;
use crate::evidence::clip;
use crate::rules::Rule;
use mcpulse_wire::transcript::{
    Exchange, Outcome, Process, TargetKind, TimedLine, Transcript, TransportKind,
};

impl Judgement<'_> {
    /// A stdio server whose session process exited on its own before the probe was done. The
    /// session's process is the last one that is not a dual-era check (the flow records the
    /// process that carried the session after the others); a dual-era check's process may exit
    /// on a legacy `initialize` without that meaning anything about the session.
    pub(super) fn exited_after_handshake(&mut self) {
        let tr = self.tr;
        if tr.target.kind != TargetKind::Stdio {
            return;
        }
        let Some(p) =
            tr.processes.iter().rev().find(|p| {
                p.purpose.as_deref() != Some(mcpulse_wire::checks::purpose::DUAL_ERA_CHECK)
            })
        else {
            return;
        };
        let Some(e) = p.exit.as_ref().filter(|e| !e.by_probe) else {
            return;
        };
        if e.at_ms > tr.total_ms + 1.0 {
            return; // after the protocol steps were done: not while the probe used it
        }
        let how = match (e.code, e.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(s)) => format!("was killed by signal {s}"),
            _ => "exited".to_owned(),
        };
        let during = tr
            .exchanges
            .iter()
            .rev()
            .find(|x| x.at_ms <= e.at_ms && !matches!(x.outcome, Outcome::Reply { .. }))
            .map(|x| format!(", during {}", x.step.as_str()))
            .unwrap_or_default();
        let hint = p
            .stderr
            .last()
            .map(|l| format!("; last stderr line: {}", l.line))
            .unwrap_or_default();
        self.add(Rule::ProcessExitedAfterHandshake.finding(format!(
            "the server {how} after the handshake{during}{hint}"
        )));
    }

    pub(super) fn process_findings(&mut self) {
        let noise = unique_lines(&self.tr.processes, |p| &p.stdout_noise);
        let dropped: usize = self
            .tr
            .processes
            .iter()
            .map(|p| p.stdout_noise_dropped)
            .sum();
        if let Some(first) = noise.first() {
            self.add(Rule::StdoutPollution.finding(format!(
                "{} non-JSON-RPC line(s) on stdout, first: {:?}",
                noise.len() + dropped,
                clip(first, 120)
            )));
        }
        let stderr: usize = stderr_lines(&self.tr.processes).len()
            + self
                .tr
                .processes
                .iter()
                .map(|p| p.stderr_dropped)
                .sum::<usize>();
        if stderr > 0 {
            self.add(Rule::Stderr.finding(format!("{stderr} line(s) on stderr")));
        }
    }
}

/// A stdio start-up slower than this is reported (`slow-startup`, info).
pub const SLOW_STARTUP_MS: f64 = 5000.0;

/// The stdio process an exchange went to: the last one started before it (not a dual-era
/// check's, which carries nothing else).
pub(super) fn process_of<'t>(
    tr: &'t Transcript,
    ex: &Exchange,
) -> Option<&'t mcpulse_wire::transcript::Process> {
    tr.processes
        .iter()
        .filter(|p| {
            p.spawn_error.is_none()
                && p.at_ms <= ex.at_ms
                && p.purpose.as_deref() != Some(mcpulse_wire::checks::purpose::DUAL_ERA_CHECK)
        })
        .max_by(|a, b| a.at_ms.total_cmp(&b.at_ms))
}

/// The handshake's start-up and its own latency (ms). Over stdio the start-up runs from the
/// spawn to the server's first output, and the handshake from then (or from the request, if
/// later) to the reply; over HTTP there is no start-up.
pub(super) fn phases(tr: &Transcript, hs: &Exchange) -> (Option<f64>, f64) {
    if hs.transport != TransportKind::Stdio {
        return (None, hs.elapsed_ms);
    }
    let Some(p) = process_of(tr, hs) else {
        return (None, hs.elapsed_ms);
    };
    let replied = hs.at_ms + hs.elapsed_ms;
    let Some(first) = p.first_output_ms else {
        return (None, hs.elapsed_ms);
    };
    let first = first.min(replied);
    // The server's first word came only after the handshake was sent, and an earlier request
    // to the same process (`server/discover`, which it ignored) went unanswered: it may have
    // been up all along, so its start-up cannot be told (not mcpulse's wait for the ignored
    // request), and the handshake is its own round trip.
    let asked_before = tr.exchanges.iter().any(|e| {
        e.transport == TransportKind::Stdio
            && e.id.is_some()
            && e.at_ms >= p.at_ms
            && e.at_ms < hs.at_ms
    });
    if asked_before && first >= hs.at_ms {
        return (None, hs.elapsed_ms);
    }
    let startup = (first - p.at_ms).max(0.0);
    (Some(startup), (replied - first.max(hs.at_ms)).max(0.0))
}

/// The stderr lines of every server process, in order, without the lines a later process
/// repeated from an earlier one (two processes of one server print the same start-up banner;
/// within one process a repeated line is kept: it happened twice).
pub(super) fn stderr_lines(processes: &[Process]) -> Vec<&str> {
    unique_lines(processes, |p| &p.stderr)
}

/// Lines of every process (as `lines` picks them), in order, without those a later process
/// repeated from an earlier one.
pub(super) fn unique_lines(
    processes: &[Process],
    lines: impl Fn(&Process) -> &[TimedLine],
) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for (i, p) in processes.iter().enumerate() {
        for l in lines(p) {
            let repeated = processes[..i]
                .iter()
                .any(|q| lines(q).iter().any(|m| m.line == l.line));
            if !repeated {
                out.push(l.line.as_str());
            }
        }
    }
    out
}

pub(super) fn stderr_tail(processes: &[Process]) -> Vec<String> {
    let all = stderr_lines(processes);
    all[all.len().saturating_sub(20)..]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_lines_repeated_by_a_later_process_are_listed_once() {
        let p = |lines: &[&str]| Process {
            stderr: lines
                .iter()
                .map(|l| TimedLine {
                    at_ms: 0.0,
                    line: (*l).to_owned(),
                })
                .collect(),
            ..Process::default()
        };
        let procs = [
            p(&[
                "Starting server...",
                "error: expected initialize",
                "retrying",
                "retrying",
            ]),
            p(&["Starting server...", "ready", "retrying"]),
        ];
        assert_eq!(
            stderr_lines(&procs),
            [
                "Starting server...",
                "error: expected initialize",
                "retrying",
                "retrying",
                "ready"
            ]
        );
        assert_eq!(stderr_tail(&procs).len(), 5);
    }
}
