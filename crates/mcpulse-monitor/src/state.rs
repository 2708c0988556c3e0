//! The state of one target, and the pure function that moves it: [`observe`].
//!
//! ```text
//!            failure_threshold unhealthy results in a row
//!   healthy ─────────────────────────────────────────────► degraded | down
//!      ▲                                                          │
//!      └──────────── success_threshold healthy results ◄─────────┘
//!   unknown ─► healthy on the first healthy result (no alert); ─► degraded|down after the
//!   failure threshold (alert). degraded ⇄ down after failure_threshold results of the other.
//!   flapping: more than flap_threshold transitions within flap_window; transitions are still
//!   recorded but alert once, as "flapping", until the window calms down (half the threshold).
//!   The default window is derived from the interval and thresholds so that it can hold them
//!   (`config::Defaults::flap_window_or_derived`).
//! ```
//!
//! Drift, auth posture, protocol era/version and grade are signals of their own: a change in
//! them is an event whatever the status. Time is an input (`now_ms`), so the policy is tested
//! without clocks.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// A confirmed or observed status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Unknown,
    Healthy,
    Degraded,
    Down,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Healthy => "healthy",
            Health::Degraded => "degraded",
            Health::Down => "down",
        }
    }
    pub fn from_status(s: mcpulse_judge::Status) -> Health {
        match s {
            mcpulse_judge::Status::Healthy => Health::Healthy,
            mcpulse_judge::Status::Degraded => Health::Degraded,
            mcpulse_judge::Status::Down => Health::Down,
        }
    }
}

/// What one check found, reduced to what the state machine needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub at_ms: i64,
    pub status: Health,
    /// `none` | `required` | `forbidden`.
    pub auth: String,
    pub era: Option<String>,
    pub protocol_version: Option<String>,
    pub grade: Option<String>,
    pub contract_digest: Option<String>,
    /// The worst drift class against the accepted contract, when drift was checked.
    pub drift: Option<String>,
    /// The first changes of that drift (breaking first), at most [`DRIFT_CHANGES_SHOWN`]: what
    /// changed, for alerts and the API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift_changes: Vec<DriftChange>,
    /// How many more changes the drift has than `drift_changes` shows.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drift_changes_more: usize,
    /// One line on why (the first finding's message), for alerts.
    pub summary: String,
    /// The dependencies seen behind the server at this check, by name: the components of its
    /// health tool's and health endpoint's documents, and `tool NAME` for each synthetic call.
    /// Empty when none was seen, or when the server itself did not answer (then nothing is
    /// known about what is behind it, and the components keep their state).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, Component>,
    /// This check was unhealthy only because of dependencies it tracks as components: the
    /// liveness and protocol layers were healthy and every warning or critical finding is one
    /// that a component here names (see `runner::explained_by_components`). Such an outage
    /// pages as the components' incidents, not as the target's too (one alert per outage).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_components: bool,
    /// The server answered the protocol, though the check may be down for what is behind it
    /// (see [`Observation::answered`]). False in observations stored before it existed, which
    /// then read as before: a down check did not answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub server_answered: bool,
    /// The security findings behind the grade, with their evidence (bounded: see
    /// [`SecurityEvidence::of`]). Kept here so that the grade's evidence survives a restart
    /// with the rest of the state (the `targets.state` column; no migration: old rows read
    /// as none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security: Vec<SecurityEvidence>,
}

/// How many security findings an observation keeps, and how many evidence lines each.
pub const SECURITY_KEPT: usize = 20;
pub const EVIDENCE_LINES: usize = 5;

/// One security finding of a check, as the status page shows it under the grade: the rule,
/// its level, the message and the requests and responses that showed it. Every string is
/// inert and bounded (`mcpulse_wire::text`): it comes from the server's answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityEvidence {
    pub code: String,
    pub severity: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
}

impl SecurityEvidence {
    /// The first [`SECURITY_KEPT`] findings of a report's security section, each with its first
    /// [`EVIDENCE_LINES`] evidence lines.
    pub fn of(sec: &mcpulse_judge::security::Security) -> Vec<SecurityEvidence> {
        use mcpulse_wire::text;
        sec.findings
            .iter()
            .take(SECURITY_KEPT)
            .map(|f| SecurityEvidence {
                code: f.code.code().to_owned(),
                severity: f.severity.as_str().to_owned(),
                message: text::message(&f.message).into_owned(),
                evidence: f
                    .evidence
                    .iter()
                    .take(EVIDENCE_LINES)
                    .map(|e| text::message(e).into_owned())
                    .collect(),
            })
            .collect()
    }
}

impl Observation {
    /// Whether this check got an answer from the server: every check that is not down, and a
    /// down one whose server answered the protocol (down for a dependency, a critical call,
    /// its health endpoint). Its signals (auth, protocol, grade, drift) are compared only
    /// then: a check that got no answer observed none of them.
    pub fn answered(&self) -> bool {
        self.status != Health::Down || self.server_answered
    }
}

/// One dependency as one check saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Component {
    pub status: Health,
    /// Why, when not healthy (inert: built from the judge's inert texts).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The most components a target keeps a state for. The judge lists at most 32 a document and
/// the calls are the config's, but a server that renames its components at every check must
/// not grow the state, the store row and the API view without bound: components past this
/// are not tracked (the findings still name them), except that a call takes the place of a
/// document's component not seen at this check.
pub const MAX_TRACKED_COMPONENTS: usize = 64;

/// The confirmed state of one component, with the same thresholds as its target's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentState {
    pub status: Health,
    pub since_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streak: Option<(Health, u32)>,
    /// Checks in a row that answered without naming this component: at
    /// [`FORGET_COMPONENT_AFTER`] it is forgotten (a component the server dropped, or a call
    /// removed from the config, must not hold a slot, or an incident, for ever).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub unseen: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// Checks in a row a component may go unnamed by an answering server before it is forgotten
/// (an open incident of it is then resolved as "no longer reported").
pub const FORGET_COMPONENT_AFTER: u32 = 10;

/// Synthetic calls are tracked as `tool NAME`: the config asked for them, so over the cap they
/// take the place of a document's component.
fn is_call(name: &str) -> bool {
    name.starts_with("tool ")
}

pub(crate) fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// How many of a drift's changes an observation keeps (alerts and the API show them; the
/// whole diff is `mcpulse diff` of the stored contracts).
pub const DRIFT_CHANGES_SHOWN: usize = 3;

/// One classified change of a drift: its code (`docs/drift.md`), where, and its class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftChange {
    pub code: String,
    pub path: String,
    pub class: String,
}

/// How many changes a drift event keeps (the rest are counted): a contract rewritten from
/// scratch must not make one event row unbounded.
pub const DRIFT_DIFF_KEPT: usize = 50;
/// How many characters of a change's old or new value (compact JSON) are kept.
pub const DRIFT_VALUE_CHARS: usize = 300;

/// One change of a drift as `mcpulse diff` shows it: its class and code, where, what, and the
/// old and new values (compact JSON, cut to [`DRIFT_VALUE_CHARS`]). Kept in the drift event so
/// that the status page can show each past drift's classified diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftDiffLine {
    pub class: String,
    pub code: String,
    pub path: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<String>,
}

impl DriftDiffLine {
    /// Every change of a drift, breaking first (in the diff's order within a class), the
    /// first [`DRIFT_DIFF_KEPT`] of them, and how many more there are. Values and messages
    /// are bounded and made inert here (`mcpulse_wire::text`), as the server chose them.
    pub fn all_of(d: &mcpulse_judge::drift::Drift) -> (Vec<DriftDiffLine>, usize) {
        let mut all: Vec<&mcpulse_judge::drift::Change> = d.changes.iter().collect();
        all.sort_by_key(|c| std::cmp::Reverse(c.class));
        let more = all.len().saturating_sub(DRIFT_DIFF_KEPT);
        use mcpulse_wire::text;
        let value = |v: &Option<serde_json::Value>| {
            v.as_ref()
                .map(|v| text::inert(&v.to_string(), DRIFT_VALUE_CHARS).into_owned())
        };
        let kept = all
            .into_iter()
            .take(DRIFT_DIFF_KEPT)
            .map(|c| DriftDiffLine {
                class: c.class.as_str().to_owned(),
                code: c.code.code().to_owned(),
                path: text::message(&c.path).into_owned(),
                message: text::message(&c.message).into_owned(),
                old: value(&c.old),
                new: value(&c.new),
            })
            .collect();
        (kept, more)
    }
}

impl DriftChange {
    /// The risky and breaking changes of a drift, breaking first, the first
    /// [`DRIFT_CHANGES_SHOWN`] of them, and how many more there are.
    pub fn first_of(d: &mcpulse_judge::drift::Drift) -> (Vec<DriftChange>, usize) {
        use mcpulse_judge::drift::Class;
        let mut notable: Vec<&mcpulse_judge::drift::Change> = d
            .changes
            .iter()
            .filter(|c| c.class != Class::Info)
            .collect();
        notable.sort_by_key(|c| std::cmp::Reverse(c.class));
        let more = notable.len().saturating_sub(DRIFT_CHANGES_SHOWN);
        let shown = notable
            .into_iter()
            .take(DRIFT_CHANGES_SHOWN)
            .map(|c| DriftChange {
                code: c.code.code().to_owned(),
                // The path names the server's tools: inert and cut, as the diff's lines.
                path: mcpulse_wire::text::field(&c.path).into_owned(),
                class: c.class.as_str().to_owned(),
            })
            .collect();
        (shown, more)
    }

    /// `item-removed tools[fetch]; enum-narrowed tools[search]… (+2 more)`: for a summary.
    pub fn describe(changes: &[DriftChange], more: usize) -> String {
        let mut s = changes
            .iter()
            .map(|c| format!("{} {}", c.code, c.path))
            .collect::<Vec<_>>()
            .join("; ");
        if more > 0 {
            s.push_str(&format!(" (+{more} more)"));
        }
        s
    }
}

#[cfg(test)]
impl Observation {
    /// An observation of `status` at `at_ms`, with no facts about the server beside the summary
    /// (for tests).
    pub(crate) fn bare(status: Health, at_ms: i64, summary: &str) -> Observation {
        Observation {
            at_ms,
            status,
            auth: "none".into(),
            era: None,
            protocol_version: None,
            grade: None,
            contract_digest: None,
            drift: None,
            drift_changes: Vec::new(),
            drift_changes_more: 0,
            summary: summary.into(),
            components: BTreeMap::new(),
            by_components: false,
            server_answered: false,
            security: Vec::new(),
        }
    }
}

/// Thresholds for one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub failure: u32,
    pub success: u32,
    pub flap_window_ms: i64,
    pub flap_threshold: u32,
}

/// The persisted state of one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetState {
    /// The confirmed status (what alerts and the API report).
    pub status: Health,
    pub since_ms: i64,
    /// The streak that may change the confirmed status: its status and length.
    pub streak: Option<(Health, u32)>,
    /// Times of recent transitions, for flap detection.
    pub transitions: VecDeque<i64>,
    pub flapping: bool,
    pub last: Option<Observation>,
    /// While `last` is a down observation: the last one in which the server answered, which
    /// the signals (auth, protocol, grade, drift) are compared with, so that an outage between
    /// two answers neither raises a change nor hides one. `None` when `last` is itself an
    /// answer (it is then the one compared with), so it is stored only during an outage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_up: Option<Observation>,
    /// The dependencies behind the server, by name (see [`Observation::components`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, ComponentState>,
    /// Unhealthy checks in a row that their components do not explain
    /// ([`Observation::by_components`] false): once it reaches the failure threshold the
    /// outage is the target's own and pages as such (see [`TargetState::paged_by_components`]).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub unexplained: u32,
}

impl TargetState {
    /// Whether the target's confirmed outage is paged by its components' incidents alone:
    /// it is down or degraded, and fewer than `failure` unhealthy checks in a row were not
    /// explained by components (a protocol failure must persist as long as any outage does
    /// before it pages). A component counts while its unhealthy streak is still pending as
    /// well as once confirmed: the target's streak may be ahead of the component's (a check
    /// the health tool could not answer, then one naming the component), and the component
    /// pages at its own threshold a check later. When no component is unhealthy any more (they
    /// recovered while the target's recovery is still pending) the outage stays theirs: a
    /// check the components do not explain pages only at `failure` of them in a row. The one
    /// exception is severity: when the unhealthy components are all milder than the target
    /// (only degraded behind a target down) the target pages, so the outage pages at the
    /// severity it has. Otherwise the target's `status` incident opens, as it does for an
    /// outage of the server itself.
    pub fn paged_by_components(&self, t: Thresholds) -> bool {
        let bad = |h: Health| matches!(h, Health::Down | Health::Degraded);
        if !bad(self.status) || self.unexplained >= t.failure {
            return false;
        }
        // Each component's worst state, confirmed or pending.
        let worst = |c: &ComponentState| {
            let pending = c.streak.map(|(h, _)| h).filter(|h| bad(*h));
            Some(c.status).filter(|h| bad(*h)).max(pending)
        };
        let unhealthy: Vec<Health> = self.components.values().filter_map(worst).collect();
        unhealthy.is_empty() || unhealthy.iter().any(|h| *h >= self.status)
    }
}

impl Default for TargetState {
    fn default() -> Self {
        TargetState {
            status: Health::Unknown,
            since_ms: 0,
            streak: None,
            transitions: VecDeque::new(),
            flapping: false,
            last: None,
            last_up: None,
            components: BTreeMap::new(),
            unexplained: 0,
        }
    }
}

/// What changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The confirmed status changed. `quiet` for unknown → healthy (nothing to tell).
    Transition {
        from: Health,
        to: Health,
        at_ms: i64,
        quiet: bool,
        reason: String,
    },
    FlappingStarted {
        at_ms: i64,
        transitions: u32,
    },
    FlappingStopped {
        at_ms: i64,
        status: Health,
    },
    Drift {
        at_ms: i64,
        class: String,
        digest: Option<String>,
        /// The classified diff against the accepted contract (filled in by the runner, which
        /// computed it; empty for an outline, whose changes are not known).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        changes: Vec<DriftDiffLine>,
        /// How many changes the diff had beyond `changes`.
        #[serde(default, skip_serializing_if = "is_zero")]
        more: usize,
    },
    AuthChanged {
        at_ms: i64,
        from: String,
        to: String,
    },
    ProtocolChanged {
        at_ms: i64,
        from: String,
        to: String,
    },
    GradeChanged {
        at_ms: i64,
        from: String,
        to: String,
    },
    /// A dependency behind the server changed its confirmed state (unknown → healthy is not
    /// told). Alerted as "`component` down behind the target".
    Component {
        at_ms: i64,
        component: String,
        from: Health,
        to: Health,
        reason: String,
    },
    /// The target was removed from the config (a reload); `resolved` are the dedup keys of
    /// the incidents that were open and are resolved because of it. Not a state-machine
    /// event: the daemon records it.
    Removed {
        at_ms: i64,
        resolved: Vec<String>,
    },
}

/// Folds one observation into the state.
pub fn observe(
    state: &TargetState,
    obs: &Observation,
    t: Thresholds,
    now_ms: i64,
) -> (TargetState, Vec<Event>) {
    let mut s = state.clone();
    let mut events = Vec::new();

    // Signals that are not the status: compared with the last observation in which the server
    // answered. A down check observes none of them.
    let prev_up = state
        .last_up
        .as_ref()
        .or_else(|| state.last.as_ref().filter(|o| o.answered()));
    if !obs.answered() {
        // Nothing to compare: a check without an answer observes none of the signals.
    } else if let Some(prev) = prev_up {
        if prev.auth != obs.auth {
            events.push(Event::AuthChanged {
                at_ms: now_ms,
                from: prev.auth.clone(),
                to: obs.auth.clone(),
            });
        }
        let proto = |o: &Observation| match (&o.era, &o.protocol_version) {
            (Some(e), Some(v)) => Some(format!("{e} {v}")),
            (Some(e), None) => Some(e.clone()),
            _ => None,
        };
        if let (Some(a), Some(b)) = (proto(prev), proto(obs))
            && a != b
        {
            events.push(Event::ProtocolChanged {
                at_ms: now_ms,
                from: a,
                to: b,
            });
        }
        if let (Some(a), Some(b)) = (&prev.grade, &obs.grade)
            && a != b
        {
            events.push(Event::GradeChanged {
                at_ms: now_ms,
                from: a.clone(),
                to: b.clone(),
            });
        }
        if obs.drift.is_some()
            && (obs.drift != prev.drift || obs.contract_digest != prev.contract_digest)
        {
            let class = obs.drift.clone().unwrap_or_default();
            if class == "breaking" || class == "risky" {
                events.push(Event::Drift {
                    at_ms: now_ms,
                    class,
                    digest: obs.contract_digest.clone(),
                    changes: Vec::new(),
                    more: 0,
                });
            }
        }
    } else if let Some(class) = obs.drift.as_deref()
        && (class == "breaking" || class == "risky")
    {
        events.push(Event::Drift {
            at_ms: now_ms,
            class: class.to_owned(),
            digest: obs.contract_digest.clone(),
            changes: Vec::new(),
            more: 0,
        });
    }

    // The status.
    let observed = obs.status;
    if observed == s.status {
        s.streak = None;
    } else if s.status == Health::Unknown && observed == Health::Healthy {
        events.push(Event::Transition {
            from: Health::Unknown,
            to: Health::Healthy,
            at_ms: now_ms,
            quiet: true,
            reason: obs.summary.clone(),
        });
        s.status = Health::Healthy;
        s.since_ms = now_ms;
        s.streak = None;
    } else {
        // The streak counts results on the same side (healthy vs not) of the confirmed status;
        // leaving healthy, degraded and down count together and the latest wins.
        let len = match s.streak {
            Some((h, n)) if same_side(h, observed) => n + 1,
            _ => 1,
        };
        s.streak = Some((observed, len));
        let needed = if observed == Health::Healthy {
            t.success
        } else {
            t.failure
        };
        if len >= needed {
            let from = s.status;
            s.status = observed;
            s.since_ms = now_ms;
            s.streak = None;
            if from != Health::Unknown || observed != Health::Healthy {
                s.transitions.push_back(now_ms);
            }
            events.push(Event::Transition {
                from,
                to: observed,
                at_ms: now_ms,
                quiet: false,
                reason: obs.summary.clone(),
            });
        }
    }

    // Flapping, with hysteresis.
    while s
        .transitions
        .front()
        .is_some_and(|&at| at < now_ms - t.flap_window_ms)
    {
        s.transitions.pop_front();
    }
    let n = s.transitions.len() as u32;
    if !s.flapping && n > t.flap_threshold {
        s.flapping = true;
        events.push(Event::FlappingStarted {
            at_ms: now_ms,
            transitions: n,
        });
    } else if s.flapping && n <= t.flap_threshold / 2 {
        s.flapping = false;
        events.push(Event::FlappingStopped {
            at_ms: now_ms,
            status: s.status,
        });
    }
    s.last_up = if !obs.answered() {
        prev_up.cloned() // the answer before this outage
    } else {
        None // this observation is the last answer
    };
    s.last = Some(obs.clone());
    s.unexplained = if obs.status == Health::Healthy || obs.by_components {
        0
    } else {
        s.unexplained.saturating_add(1)
    };
    // Nothing is known behind a server that did not answer: no component is counted unseen.
    let answered = obs.answered() || !obs.components.is_empty();
    forget_unseen(
        &mut s.components,
        &obs.components,
        answered,
        now_ms,
        &mut events,
    );
    components(&mut s.components, &obs.components, t, now_ms, &mut events);
    (s, events)
}

/// Counts the components an answering check did not name, and forgets those unnamed for
/// [`FORGET_COMPONENT_AFTER`] checks: one that was down or degraded ends as `unknown` (an event,
/// so its incident is resolved as no longer reported).
fn forget_unseen(
    states: &mut BTreeMap<String, ComponentState>,
    seen: &BTreeMap<String, Component>,
    answered: bool,
    now_ms: i64,
    events: &mut Vec<Event>,
) {
    if !answered {
        return;
    }
    let mut gone = Vec::new();
    for (name, st) in states.iter_mut() {
        if seen.contains_key(name) {
            st.unseen = 0;
            continue;
        }
        st.unseen = st.unseen.saturating_add(1);
        if st.unseen >= FORGET_COMPONENT_AFTER {
            gone.push(name.clone());
        }
    }
    for name in gone {
        let Some(st) = states.remove(&name) else {
            continue;
        };
        if matches!(st.status, Health::Down | Health::Degraded) {
            events.push(Event::Component {
                at_ms: now_ms,
                component: name,
                from: st.status,
                to: Health::Unknown,
                reason: "no longer reported".to_owned(),
            });
        }
    }
}

/// Over the cap, makes room for a call: drops a document's component this check did not name
/// that is neither down nor degraded (no incident is lost), the longest unseen first.
fn evict_one(
    states: &mut BTreeMap<String, ComponentState>,
    seen: &BTreeMap<String, Component>,
) -> bool {
    let victim = states
        .iter()
        .filter(|(n, st)| {
            !is_call(n)
                && !seen.contains_key(*n)
                && !matches!(st.status, Health::Down | Health::Degraded)
        })
        .max_by_key(|(_, st)| st.unseen)
        .map(|(n, _)| n.clone());
    victim.is_some_and(|n| states.remove(&n).is_some())
}

/// Folds the components one check saw into their states, with the target's thresholds (a
/// component is down after `failure` such results in a row, healthy again after `success`);
/// no flap detection of their own. A component not seen keeps its state: the check may not
/// have reached it (a health tool that timed out), and guessing "healthy" would resolve an
/// outage that goes on (until [`forget_unseen`]). Only [`MAX_TRACKED_COMPONENTS`] are tracked,
/// the calls first.
fn components(
    states: &mut BTreeMap<String, ComponentState>,
    seen: &BTreeMap<String, Component>,
    t: Thresholds,
    now_ms: i64,
    events: &mut Vec<Event>,
) {
    // The calls first: over the cap they are tracked before a document's components.
    let ordered = seen
        .iter()
        .filter(|(n, _)| is_call(n))
        .chain(seen.iter().filter(|(n, _)| !is_call(n)));
    for (name, c) in ordered {
        if !states.contains_key(name) {
            if states.len() >= MAX_TRACKED_COMPONENTS && !(is_call(name) && evict_one(states, seen))
            {
                continue;
            }
            states.insert(
                name.clone(),
                ComponentState {
                    status: Health::Unknown,
                    since_ms: now_ms,
                    streak: None,
                    unseen: 0,
                },
            );
        }
        let Some(st) = states.get_mut(name) else {
            continue;
        };
        let observed = c.status;
        if observed == st.status {
            st.streak = None;
            continue;
        }
        if st.status == Health::Unknown && observed == Health::Healthy {
            *st = ComponentState {
                status: Health::Healthy,
                since_ms: now_ms,
                streak: None,
                unseen: 0,
            };
            continue;
        }
        let len = match st.streak {
            Some((h, n)) if same_side(h, observed) => n + 1,
            _ => 1,
        };
        let needed = if observed == Health::Healthy {
            t.success
        } else {
            t.failure
        };
        if len < needed {
            st.streak = Some((observed, len));
            continue;
        }
        events.push(Event::Component {
            at_ms: now_ms,
            component: name.clone(),
            from: st.status,
            to: observed,
            reason: c.reason.clone(),
        });
        *st = ComponentState {
            status: observed,
            since_ms: now_ms,
            streak: None,
            unseen: 0,
        };
    }
}

fn same_side(a: Health, b: Health) -> bool {
    (a == Health::Healthy) == (b == Health::Healthy)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        failure: 3,
        success: 2,
        flap_window_ms: 600_000,
        flap_threshold: 4,
    };

    fn obs(status: Health, at: i64) -> Observation {
        Observation {
            at_ms: at,
            status,
            auth: "none".into(),
            era: Some("legacy".into()),
            protocol_version: Some("2025-11-25".into()),
            grade: Some("A".into()),
            contract_digest: None,
            drift: None,
            drift_changes: Vec::new(),
            drift_changes_more: 0,
            summary: String::new(),
            components: BTreeMap::new(),
            by_components: false,
            server_answered: false,
            security: Vec::new(),
        }
    }

    /// Components are tracked up to the cap, a component not seen keeps its state, and a
    /// down observation of the server (no components) changes none of them.
    #[test]
    fn components_are_bounded_and_keep_their_state_when_not_seen() {
        let mut o1 = obs(Health::Healthy, 0);
        for i in 0..(MAX_TRACKED_COMPONENTS + 10) {
            o1.components.insert(
                format!("c{i:03}"),
                Component {
                    status: Health::Down,
                    reason: String::new(),
                },
            );
        }
        let (s, _) = observe(&TargetState::default(), &o1, T, 0);
        assert_eq!(s.components.len(), MAX_TRACKED_COMPONENTS);
        let (s, _) = observe(&s, &o1, T, 1);
        let (s, ev) = observe(&s, &o1, T, 2);
        let downs = ev
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    Event::Component {
                        to: Health::Down,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(downs, MAX_TRACKED_COMPONENTS, "after the failure threshold");
        let (s2, ev) = observe(&s, &obs(Health::Down, 3), T, 3);
        assert!(!ev.iter().any(|e| matches!(e, Event::Component { .. })));
        assert_eq!(s2.components, s.components);
    }

    /// A component the server stops naming is forgotten after `FORGET_COMPONENT_AFTER`
    /// answering checks, ending its outage as `unknown`; over the cap, a call takes the place
    /// of a document component that was not seen.
    #[test]
    fn unseen_components_are_forgotten_and_calls_win_over_the_cap() {
        let comp = |status| Component {
            status,
            reason: String::new(),
        };
        let mut o = obs(Health::Healthy, 0);
        o.components.insert("db".into(), comp(Health::Down));
        let mut s = TargetState::default();
        for k in 0..3 {
            s = observe(&s, &o, T, k).0;
        }
        assert_eq!(s.components["db"].status, Health::Down);
        let quiet = obs(Health::Healthy, 0);
        let mut forgotten = Vec::new();
        for k in 0..FORGET_COMPONENT_AFTER {
            assert!(s.components.contains_key("db"), "check {k}");
            let (next, ev) = observe(&s, &quiet, T, 10 + i64::from(k));
            forgotten.extend(ev);
            s = next;
        }
        assert!(!s.components.contains_key("db"));
        assert!(
            forgotten.iter().any(|e| matches!(
                e,
                Event::Component { component, from: Health::Down, to: Health::Unknown, .. }
                    if component == "db"
            )),
            "{forgotten:?}"
        );

        // Full of a document's components, then a call appears beside other ones.
        let mut full = obs(Health::Healthy, 0);
        for i in 0..MAX_TRACKED_COMPONENTS {
            full.components
                .insert(format!("c{i:03}"), comp(Health::Healthy));
        }
        let s = observe(&TargetState::default(), &full, T, 0).0;
        let mut next = obs(Health::Healthy, 0);
        next.components
            .insert("tool ping_db".into(), comp(Health::Healthy));
        next.components.insert("zzz".into(), comp(Health::Healthy));
        let s = observe(&s, &next, T, 1).0;
        assert!(
            s.components.contains_key("tool ping_db"),
            "the call is tracked"
        );
        assert_eq!(s.components.len(), MAX_TRACKED_COMPONENTS);
    }

    #[test]
    fn a_drift_is_told_by_its_first_changes_breaking_first() {
        use mcpulse_judge::drift::{Change, Class, Drift};
        let change = |code: &str, class| Change {
            code: mcpulse_judge::drift::DriftRule::from_code(code).unwrap(),
            class,
            path: format!("tools[{code}]"),
            old: None,
            new: None,
            message: String::new(),
        };
        let d = Drift {
            schema: "mcpulse.drift/v1".into(),
            baseline_target: String::new(),
            target: String::new(),
            baseline_digest: String::new(),
            digest: String::new(),
            class: Some(Class::Breaking),
            breaking: 2,
            risky: 3,
            info: 1,
            changes: vec![
                change("item-added", Class::Info),
                change("description-changed", Class::Risky),
                change("item-removed", Class::Breaking),
                change("title-changed", Class::Risky),
                change("enum-narrowed", Class::Breaking),
                change("annotation-risk-widened", Class::Risky),
            ],
            baseline_mismatches: Vec::new(),
        };
        let (shown, more) = DriftChange::first_of(&d);
        let codes: Vec<&str> = shown.iter().map(|c| c.code.as_str()).collect();
        assert_eq!(
            codes,
            ["item-removed", "enum-narrowed", "description-changed"]
        );
        assert_eq!(more, 2);
        assert_eq!(
            DriftChange::describe(&shown, more),
            "item-removed tools[item-removed]; enum-narrowed tools[enum-narrowed]; description-changed tools[description-changed] (+2 more)"
        );
    }

    /// Runs a sequence of statuses, one a minute; returns the final state and every event.
    fn run(seq: &[Health]) -> (TargetState, Vec<Event>) {
        let mut s = TargetState::default();
        let mut all = Vec::new();
        for (i, h) in seq.iter().enumerate() {
            let at = i as i64 * 60_000;
            let (n, ev) = observe(&s, &obs(*h, at), T, at);
            s = n;
            all.extend(ev);
        }
        (s, all)
    }

    fn transitions(ev: &[Event]) -> Vec<(Health, Health, bool)> {
        ev.iter()
            .filter_map(|e| match e {
                Event::Transition {
                    from, to, quiet, ..
                } => Some((*from, *to, *quiet)),
                _ => None,
            })
            .collect()
    }

    use Health::*;

    #[test]
    fn first_healthy_is_quiet() {
        let (s, ev) = run(&[Healthy]);
        assert_eq!(s.status, Healthy);
        assert_eq!(transitions(&ev), vec![(Unknown, Healthy, true)]);
    }

    #[test]
    fn failure_threshold_confirms_down() {
        let (s, ev) = run(&[Healthy, Down, Down]);
        assert_eq!(s.status, Healthy);
        assert_eq!(s.streak, Some((Down, 2)));
        assert_eq!(transitions(&ev).len(), 1);
        let (s, ev) = run(&[Healthy, Down, Down, Down]);
        assert_eq!(s.status, Down);
        assert_eq!(transitions(&ev)[1], (Healthy, Down, false));
    }

    #[test]
    fn one_slow_response_pages_nobody() {
        let (s, ev) = run(&[Healthy, Degraded, Healthy, Degraded, Healthy]);
        assert_eq!(s.status, Healthy);
        assert_eq!(transitions(&ev).len(), 1);
    }

    #[test]
    fn mixed_unhealthy_results_count_together_and_the_latest_wins() {
        let (s, _) = run(&[Healthy, Degraded, Down, Degraded]);
        assert_eq!(s.status, Degraded);
    }

    #[test]
    fn success_threshold_recovers() {
        let (s, ev) = run(&[Healthy, Down, Down, Down, Healthy]);
        assert_eq!(s.status, Down);
        let (s, ev2) = run(&[Healthy, Down, Down, Down, Healthy, Healthy]);
        assert_eq!(s.status, Healthy);
        assert_eq!(transitions(&ev2).last(), Some(&(Down, Healthy, false)));
        assert_eq!(transitions(&ev).len() + 1, transitions(&ev2).len());
    }

    #[test]
    fn starting_down_alerts_after_the_threshold() {
        let (s, ev) = run(&[Down, Down, Down]);
        assert_eq!(s.status, Down);
        assert_eq!(transitions(&ev), vec![(Unknown, Down, false)]);
    }

    #[test]
    fn flapping_is_detected_and_ends() {
        let t = Thresholds {
            failure: 1,
            success: 1,
            flap_window_ms: 600_000,
            flap_threshold: 4,
        };
        let mut s = TargetState::default();
        let mut events = Vec::new();
        let seq = [
            Healthy, Down, Healthy, Down, Healthy, Down, Healthy, Healthy,
        ];
        for (i, h) in seq.iter().enumerate() {
            let at = i as i64 * 10_000;
            let (n, ev) = observe(&s, &obs(*h, at), t, at);
            s = n;
            events.extend(ev);
        }
        assert!(s.flapping);
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, Event::FlappingStarted { .. }))
                .count(),
            1
        );
        // Quiet for a window: the flapping ends.
        let at = 20 * 60_000;
        let (n, ev) = observe(&s, &obs(Healthy, at), t, at);
        assert!(!n.flapping);
        assert!(matches!(
            ev[..],
            [Event::FlappingStopped {
                status: Healthy,
                ..
            }]
        ));
    }

    /// Signals are compared across an outage with the last answer before it: a down check (no
    /// grade, no era, auth `none`) neither raises a change when the server comes back as it
    /// was, nor hides one that happened while it was down.
    #[test]
    fn signals_across_an_outage() {
        let down = |at| {
            let mut o = obs(Down, at);
            o.grade = None;
            o.era = None;
            o.protocol_version = None;
            o
        };
        let mut graded = obs(Healthy, 0);
        graded.grade = Some("F".into());
        graded.auth = "required".into();
        graded.drift = Some("breaking".into());
        graded.contract_digest = Some("sha256:x".into());
        let (s, _) = observe(&TargetState::default(), &graded, T, 0);
        assert_eq!(s.last_up, None, "the last observation is the last answer");
        let (s, ev) = observe(&s, &down(1), T, 1);
        assert!(ev.is_empty(), "{ev:?}");
        assert_eq!(s.last_up.as_ref(), Some(&graded), "kept during the outage");
        let (s, _) = observe(&s, &down(2), T, 2);
        assert_eq!(s.last_up.as_ref(), Some(&graded));
        let mut back = graded.clone();
        back.at_ms = 2;
        let (s, ev) = observe(&s, &back, T, 2);
        assert!(ev.is_empty(), "the same answers after the outage: {ev:?}");
        assert_eq!(s.last_up, None);

        // A change made while it was down is seen on its return.
        let (s, _) = observe(&s, &down(3), T, 3);
        let mut changed = back.clone();
        changed.at_ms = 4;
        changed.grade = Some("A".into());
        changed.auth = "none".into();
        let (s, ev) = observe(&s, &changed, T, 4);
        assert!(ev.iter().any(
            |e| matches!(e, Event::GradeChanged { from, to, .. } if from == "F" && to == "A")
        ));
        assert!(ev.iter().any(
            |e| matches!(e, Event::AuthChanged { from, to, .. } if from == "required" && to == "none")
        ));

        // A state stored before `last_up` existed: the last observation stands in when it was
        // an answer, and a down one is not compared with.
        let mut old = s.clone();
        old.last_up = None;
        let (_, ev) = observe(&old, &changed, T, 5);
        assert!(ev.is_empty(), "{ev:?}");
        old.last = Some(down(5));
        let (_, ev) = observe(&old, &graded, T, 6);
        assert!(
            !ev.iter()
                .any(|e| matches!(e, Event::GradeChanged { .. } | Event::AuthChanged { .. })),
            "{ev:?}"
        );
        let stored: TargetState =
            serde_json::from_str(r#"{"status":"healthy","since_ms":0,"streak":null,"transitions":[],"flapping":false,"last":null}"#)
                .unwrap();
        assert_eq!(stored.last_up, None);
    }

    /// A check down only because of what is behind the server (it answered the protocol:
    /// a dependency, a critical call) observes the signals: a drift seen at it is an event
    /// then (not a note raised later as if it began in a maintenance window), and it is the
    /// last answer the next check is compared with.
    #[test]
    fn a_check_down_for_a_dependency_still_observes_the_signals() {
        let (s, _) = observe(&TargetState::default(), &obs(Healthy, 0), T, 0);
        let mut dep_down = obs(Down, 1);
        dep_down.server_answered = true;
        dep_down.grade = Some("C".into());
        dep_down.drift = Some("breaking".into());
        dep_down.contract_digest = Some("sha256:x".into());
        let (s, ev) = observe(&s, &dep_down, T, 1);
        assert!(
            ev.iter()
                .any(|e| matches!(e, Event::Drift { class, .. } if class == "breaking")),
            "{ev:?}"
        );
        assert!(ev.iter().any(
            |e| matches!(e, Event::GradeChanged { from, to, .. } if from == "A" && to == "C")
        ));
        assert_eq!(s.last_up, None, "it is the last answer itself");
        // The same answers at the next check: nothing new.
        let mut again = dep_down.clone();
        again.at_ms = 2;
        let (_, ev) = observe(&s, &again, T, 2);
        assert!(
            !ev.iter().any(|e| matches!(
                e,
                Event::Drift { .. } | Event::GradeChanged { .. } | Event::AuthChanged { .. }
            )),
            "{ev:?}"
        );
    }

    #[test]
    fn other_signals() {
        let s = TargetState::default();
        let (s, _) = observe(&s, &obs(Healthy, 0), T, 0);
        let mut o = obs(Healthy, 1);
        o.auth = "required".into();
        o.grade = Some("C".into());
        o.protocol_version = Some("2026-07-28".into());
        o.era = Some("modern".into());
        o.drift = Some("breaking".into());
        o.contract_digest = Some("sha256:x".into());
        let (_, ev) = observe(&s, &o, T, 1);
        assert!(
            ev.iter()
                .any(|e| matches!(e, Event::AuthChanged { to, .. } if to == "required"))
        );
        assert!(ev.iter().any(
            |e| matches!(e, Event::GradeChanged { from, to, .. } if from == "A" && to == "C")
        ));
        assert!(
            ev.iter().any(
                |e| matches!(e, Event::ProtocolChanged { to, .. } if to == "modern 2026-07-28")
            )
        );
        assert!(
            ev.iter()
                .any(|e| matches!(e, Event::Drift { class, .. } if class == "breaking"))
        );
    }
}
