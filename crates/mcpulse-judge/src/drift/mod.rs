//! Drift: a classified diff between two contracts.
//!
//! Every change is a [`Change`] with a stable code, the JSON path that changed (into the
//! baseline file), the old and new values, and a [`Class`]:
//! - **breaking**: a client built against the old contract fails (an item removed, a required
//!   parameter added, a parameter removed or renamed, a type or constraint narrowed, the output
//!   schema changed incompatibly, a capability removed, a protocol version dropped, the era
//!   crossed);
//! - **risky**: the contract still works but what the model reads or what a tool may do changed:
//!   descriptions and titles (the "rug pull" after approval), annotation flips that widen risk,
//!   invisible or bidirectional Unicode introduced, server instructions changed;
//! - **info**: additions and widenings, and any other change, so that nothing changes silently.
//!
//! The rules (code, class, meaning) are [`DriftRule`]s in `crate::rules::drift`, documented in
//! `docs/drift.md`; a change carries its rule, so its class is the rule's. This module walks the
//! server facts and the items; `schema` walks input and output schemas.

mod schema;

use crate::contract::{Contract, Item, Kind};
use schema::{output_diff, schema_diff};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::rules::docs::drift_doc;
pub use crate::rules::drift::{ALL as RULES, Class, DriftRule};

/// One change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The rule, serialized as its code.
    pub code: DriftRule,
    pub class: Class,
    /// Where, as a path into the contract: `tools[search].inputSchema.properties.q.type`.
    pub path: String,
    pub old: Option<Value>,
    pub new: Option<Value>,
    pub message: String,
}

/// The drift section of a report, and the output of `mcpulse diff`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    pub schema: String,
    pub baseline_target: String,
    pub target: String,
    pub baseline_digest: String,
    pub digest: String,
    /// The worst class found; `null` when nothing changed.
    pub class: Option<Class>,
    pub breaking: usize,
    pub risky: usize,
    pub info: usize,
    pub changes: Vec<Change>,
    /// Digests a baseline file stored that its own content did not give, when it was read with
    /// `--force` (the comparison then used the digests computed from the content). Without
    /// `--force` such a baseline is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_mismatches: Vec<crate::contract::Mismatch>,
}

impl Drift {
    /// 2 breaking, 1 risky, 0 otherwise.
    pub fn exit_code(&self) -> u8 {
        self.class.map(Class::exit_code).unwrap_or(0)
    }
}

struct Diff {
    changes: Vec<Change>,
}

impl Diff {
    fn push(
        &mut self,
        rule: DriftRule,
        path: String,
        old: Option<&Value>,
        new: Option<&Value>,
        message: String,
    ) {
        self.changes.push(Change {
            code: rule,
            class: rule.class(),
            path,
            old: old.cloned(),
            new: new.cloned(),
            message,
        });
    }
}

/// The classified changes from `old` to `new`.
pub fn diff(old: &Contract, new: &Contract) -> Drift {
    let mut d = Diff {
        changes: Vec::new(),
    };
    server_diff(&mut d, old, new);
    for kind in Kind::ALL {
        items_diff(&mut d, kind, old.items(kind), new.items(kind));
    }
    let count = |c: Class| d.changes.iter().filter(|x| x.class == c).count();
    let (breaking, risky, info) = (
        count(Class::Breaking),
        count(Class::Risky),
        count(Class::Info),
    );
    let class = d.changes.iter().map(|c| c.class).max();
    let mut changes = d.changes;
    changes.sort_by_key(|c| std::cmp::Reverse(c.class));
    Drift {
        schema: "mcpulse.drift/v1".to_owned(),
        baseline_target: old.target.clone(),
        target: new.target.clone(),
        baseline_digest: old.digest.clone(),
        digest: new.digest.clone(),
        class,
        breaking,
        risky,
        info,
        changes,
        baseline_mismatches: Vec::new(),
    }
}

fn server_diff(d: &mut Diff, old: &Contract, new: &Contract) {
    let (o, n) = (&old.server, &new.server);
    if o.era != n.era {
        d.push(
            DriftRule::EraChanged,
            "server.era".into(),
            o.era.as_ref().map(|s| Value::String(s.clone())).as_ref(),
            n.era.as_ref().map(|s| Value::String(s.clone())).as_ref(),
            format!(
                "the server moved from the {} era to the {} era",
                o.era.as_deref().unwrap_or("?"),
                n.era.as_deref().unwrap_or("?")
            ),
        );
    }
    for v in &o.supported_versions {
        if !n.supported_versions.contains(v) {
            d.push(
                DriftRule::ProtocolVersionDropped,
                "server.supported_versions".into(),
                Some(&Value::String(v.clone())),
                None,
                format!("protocol version {v} is no longer supported"),
            );
        }
    }
    for v in &n.supported_versions {
        if !o.supported_versions.contains(v) {
            d.push(
                DriftRule::ProtocolVersionAdded,
                "server.supported_versions".into(),
                None,
                Some(&Value::String(v.clone())),
                format!("protocol version {v} is now supported"),
            );
        }
    }
    let empty = Map::new();
    let oc = o.capabilities.as_object().unwrap_or(&empty);
    let nc = n.capabilities.as_object().unwrap_or(&empty);
    for (k, ov) in oc {
        match nc.get(k) {
            None => d.push(
                DriftRule::CapabilityRemoved,
                format!("server.capabilities.{k}"),
                Some(ov),
                None,
                format!("capability {k:?} is no longer advertised"),
            ),
            Some(nv) if nv != ov => d.push(
                DriftRule::OtherChanged,
                format!("server.capabilities.{k}"),
                Some(ov),
                Some(nv),
                format!("capability {k:?} changed"),
            ),
            _ => {}
        }
    }
    for (k, nv) in nc {
        if !oc.contains_key(k) {
            d.push(
                DriftRule::CapabilityAdded,
                format!("server.capabilities.{k}"),
                None,
                Some(nv),
                format!("capability {k:?} is now advertised"),
            );
        }
    }
    if o.instructions != n.instructions {
        let ov = o.instructions.clone().map(Value::String);
        let nv = n.instructions.clone().map(Value::String);
        d.push(
            DriftRule::InstructionsChanged,
            "server.instructions".into(),
            ov.as_ref(),
            nv.as_ref(),
            "the server's instructions to the model changed".into(),
        );
        if let Some(text) = &n.instructions
            && hidden_unicode(text) > hidden_unicode(o.instructions.as_deref().unwrap_or(""))
        {
            d.push(
                DriftRule::HiddenUnicodeIntroduced,
                "server.instructions".into(),
                None,
                nv.as_ref(),
                format!(
                    "the instructions now contain {} hidden Unicode character(s)",
                    hidden_unicode(text)
                ),
            );
        }
    }
    if o.server_info != n.server_info {
        d.push(
            DriftRule::ServerInfoChanged,
            "server.server_info".into(),
            Some(&o.server_info),
            Some(&n.server_info),
            "serverInfo changed".into(),
        );
    }
}

/// Both lists walked in key order at once (linear, where a lookup per item was quadratic on
/// 10,000 tools): each key's items in the old list against its items in the new one.
fn items_diff(d: &mut Diff, kind: Kind, old: &[Item], new: &[Item]) {
    // A contract's lists are sorted by key and digest; a hand-edited baseline may not be.
    fn sorted(list: &[Item]) -> Vec<&Item> {
        let mut v: Vec<&Item> = list.iter().collect();
        v.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.digest.cmp(&b.digest)));
        v
    }
    let (old, new) = (sorted(old), sorted(new));
    let (mut i, mut j) = (0, 0);
    loop {
        let key = match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) => o.key.as_str().min(n.key.as_str()),
            (Some(o), None) => o.key.as_str(),
            (None, Some(n)) => n.key.as_str(),
            (None, None) => break,
        };
        let oe = i + old[i..].iter().take_while(|x| x.key == key).count();
        let ne = j + new[j..].iter().take_while(|x| x.key == key).count();
        key_diff(d, kind, key, &old[i..oe], &new[j..ne]);
        (i, j) = (oe, ne);
    }
}

/// The items of one key, before and after (one each, but for a server listing a name twice):
/// the same digest on both sides is unchanged; the rest are paired in order and diffed; what
/// is left was removed or added. A second item under a key already listed is a duplicate.
fn key_diff(d: &mut Diff, kind: Kind, key: &str, old: &[&Item], new: &[&Item]) {
    // Both sides sorted by digest: unchanged items matched off in one walk.
    let (mut gone, mut came) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) if o.digest == n.digest => (i, j) = (i + 1, j + 1),
            (Some(o), Some(n)) if o.digest < n.digest => {
                gone.push(*o);
                i += 1;
            }
            (Some(o), None) => {
                gone.push(*o);
                i += 1;
            }
            (_, Some(n)) => {
                came.push(*n);
                j += 1;
            }
            (None, None) => break,
        }
    }
    let path = format!("{}[{}]", kind.section(), key);
    for (o, n) in gone.iter().zip(came.iter()) {
        let before = d.changes.len();
        item_diff(d, kind, &path, &o.definition, &n.definition);
        if d.changes.len() == before {
            // The digests differ: something changed that no rule names. Never silent.
            d.push(
                DriftRule::OtherChanged,
                path.clone(),
                Some(&o.definition),
                Some(&n.definition),
                format!("the {} changed", kind.noun()),
            );
        }
    }
    let paired = gone.len().min(came.len());
    for o in &gone[paired..] {
        let message = if new.is_empty() {
            format!("{} {key:?} was removed", kind.noun())
        } else {
            format!("one of the {}s named {key:?} was removed", kind.noun())
        };
        d.push(
            DriftRule::ItemRemoved,
            path.clone(),
            Some(&o.definition),
            None,
            message,
        );
    }
    // A key the old contract did not list is added once; each item past as many as the old
    // contract had under it is a duplicate.
    for (k, n) in came[paired..].iter().enumerate() {
        let had = old.len().saturating_sub(gone.len()) + paired + k;
        if had == 0 {
            d.push(
                DriftRule::ItemAdded,
                path.clone(),
                None,
                Some(&n.definition),
                format!("{} {key:?} was added", kind.noun()),
            );
        } else {
            d.push(
                DriftRule::ItemDuplicated,
                path.clone(),
                None,
                Some(&n.definition),
                format!(
                    "another {} named {key:?} was added: the server now lists {} under that name, and a client may call any of them",
                    kind.noun(),
                    new.len()
                ),
            );
        }
        hidden_in_item(d, &path, &Value::Null, &n.definition);
    }
}

fn item_diff(d: &mut Diff, kind: Kind, path: &str, old: &Value, new: &Value) {
    let empty = Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    let mut handled = vec!["name", "uri", "uriTemplate"];
    for field in ["description", "title"] {
        handled.push(field);
        if o.get(field) != n.get(field) {
            let code = if field == "description" {
                DriftRule::DescriptionChanged
            } else {
                DriftRule::TitleChanged
            };
            d.push(
                code,
                format!("{path}.{field}"),
                o.get(field),
                n.get(field),
                format!("the {}'s {field} changed", kind.noun()),
            );
        }
    }
    hidden_in_item(d, path, old, new);
    match kind {
        Kind::Tool => {
            handled.extend(["annotations", "inputSchema", "outputSchema"]);
            annotations_diff(d, path, o.get("annotations"), n.get("annotations"));
            schema_diff(
                d,
                &format!("{path}.inputSchema"),
                o.get("inputSchema").unwrap_or(&Value::Null),
                n.get("inputSchema").unwrap_or(&Value::Null),
            );
            output_diff(
                d,
                &format!("{path}.outputSchema"),
                o.get("outputSchema"),
                n.get("outputSchema"),
            );
        }
        Kind::Prompt => {
            handled.push("arguments");
            prompt_args_diff(d, path, o.get("arguments"), n.get("arguments"));
        }
        Kind::Resource | Kind::ResourceTemplate => {}
    }
    rest_diff(d, path, o, n, &handled);
}

/// Every other key of an item: reported as `other-changed`, one change per top-level key.
fn rest_diff(
    d: &mut Diff,
    path: &str,
    o: &Map<String, Value>,
    n: &Map<String, Value>,
    handled: &[&str],
) {
    let mut keys: Vec<&String> = o
        .keys()
        .chain(n.keys())
        .filter(|k| !handled.contains(&k.as_str()))
        .collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        if o.get(k) != n.get(k) {
            d.push(
                DriftRule::OtherChanged,
                format!("{path}.{k}"),
                o.get(k),
                n.get(k),
                format!("{k} changed"),
            );
        }
    }
}

fn annotations_diff(d: &mut Diff, path: &str, old: Option<&Value>, new: Option<&Value>) {
    if old == new {
        return;
    }
    let hint = |v: Option<&Value>, k: &str, default: bool| {
        v.and_then(|a| a.get(k))
            .and_then(Value::as_bool)
            .unwrap_or(default)
    };
    let mut widened = false;
    // (hint, default, the value that is riskier)
    for (k, default, risky) in [
        ("readOnlyHint", false, false),
        ("destructiveHint", true, true),
        ("openWorldHint", true, true),
    ] {
        let (o, n) = (hint(old, k, default), hint(new, k, default));
        if o != n && n == risky {
            widened = true;
            d.push(
                DriftRule::AnnotationRiskWidened,
                format!("{path}.annotations.{k}"),
                Some(&Value::Bool(o)),
                Some(&Value::Bool(n)),
                format!(
                    "{k} went from {o} to {n} (with the spec's default of {default} when absent)"
                ),
            );
        }
    }
    if !widened {
        d.push(
            DriftRule::AnnotationChanged,
            format!("{path}.annotations"),
            old,
            new,
            "annotations changed without widening risk".into(),
        );
    }
}

fn prompt_args_diff(d: &mut Diff, path: &str, old: Option<&Value>, new: Option<&Value>) {
    let args = |v: Option<&Value>| -> Vec<(String, bool, Value)> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| {
                        Some((
                            x.get("name")?.as_str()?.to_owned(),
                            x.get("required").and_then(Value::as_bool).unwrap_or(false),
                            x.clone(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (oa, na) = (args(old), args(new));
    for (name, oreq, ov) in &oa {
        let p = format!("{path}.arguments[{name}]");
        match na.iter().find(|(n, _, _)| n == name) {
            None => d.push(
                DriftRule::ParameterRemoved,
                p,
                Some(ov),
                None,
                format!("prompt argument {name:?} was removed"),
            ),
            Some((_, nreq, nv)) => {
                if *nreq && !oreq {
                    d.push(
                        DriftRule::RequiredParameterAdded,
                        p.clone(),
                        Some(ov),
                        Some(nv),
                        format!("prompt argument {name:?} is now required"),
                    );
                } else if !nreq && *oreq {
                    d.push(
                        DriftRule::Widened,
                        p.clone(),
                        Some(ov),
                        Some(nv),
                        format!("prompt argument {name:?} is no longer required"),
                    );
                }
                if ov.get("description") != nv.get("description") {
                    d.push(
                        DriftRule::DescriptionChanged,
                        format!("{p}.description"),
                        ov.get("description"),
                        nv.get("description"),
                        format!("prompt argument {name:?} description changed"),
                    );
                }
            }
        }
    }
    for (name, req, nv) in &na {
        if !oa.iter().any(|(n, _, _)| n == name) {
            let code = if *req {
                DriftRule::RequiredParameterAdded
            } else {
                DriftRule::OptionalParameterAdded
            };
            d.push(
                code,
                format!("{path}.arguments[{name}]"),
                None,
                Some(nv),
                format!("prompt argument {name:?} was added"),
            );
        }
    }
}

/// Invisible, bidirectional-control and tag characters: ways to hide text from a person that a
/// model still reads. The invisible and bidi characters `mcpulse_wire::text` escapes, but the
/// C0/C1 controls and the line separators.
pub fn is_hidden_char(c: char) -> bool {
    matches!(c,
        '\u{00AD}'                 // soft hyphen
        | '\u{061C}'               // Arabic letter mark (bidi)
        | '\u{180E}'
        | '\u{200B}'..='\u{200F}'   // zero-width space/joiners, LRM, RLM
        | '\u{202A}'..='\u{202E}' // bidi embeddings and overrides
        | '\u{2060}'..='\u{206F}' // word joiner, invisible operators, bidi isolates, format controls
        | '\u{FEFF}'              // zero-width no-break space
        | '\u{FFF9}'..='\u{FFFB}' // interlinear annotation
        | '\u{E0000}'..='\u{E007F}' // tag characters
    )
}

fn hidden_unicode(s: &str) -> usize {
    s.chars().filter(|c| is_hidden_char(*c)).count()
}

/// Every string in a value, with its path: values, and object keys (a parameter's name) at
/// `{path}.{key} (name)`.
fn strings_in<'a>(v: &'a Value, path: &str, out: &mut Vec<(String, &'a str)>) {
    match v {
        Value::String(s) => out.push((path.to_owned(), s)),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                strings_in(x, &format!("{path}[{i}]"), out);
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                if k.chars().any(is_hidden_char) {
                    out.push((format!("{path}.{k} (name)"), k));
                }
                strings_in(x, &format!("{path}.{k}"), out);
            }
        }
        _ => {}
    }
}

/// Hidden characters that appeared in `new` (a string holding more of them than the string at
/// its path in `old`), in one pass over each side.
fn hidden_in_item(d: &mut Diff, path: &str, old: &Value, new: &Value) {
    let mut ns = Vec::new();
    strings_in(new, path, &mut ns);
    ns.retain(|(_, s)| s.chars().any(is_hidden_char));
    if ns.is_empty() {
        return;
    }
    let mut os = Vec::new();
    strings_in(old, path, &mut os);
    let before: std::collections::HashMap<String, usize> = os
        .into_iter()
        .map(|(p, s)| (p, hidden_unicode(s)))
        .filter(|(_, n)| *n > 0)
        .collect();
    for (p, s) in ns {
        let n = hidden_unicode(s);
        if n > before.get(&p).copied().unwrap_or(0) {
            d.push(
                DriftRule::HiddenUnicodeIntroduced,
                p,
                None,
                Some(&Value::String(s.to_owned())),
                format!(
                    "{n} hidden Unicode character(s) (zero-width, bidi control or tag) appeared"
                ),
            );
        }
    }
}

/// At most ten values, then how many more.
fn list(v: &[&Value]) -> String {
    const SHOWN: usize = 10;
    let mut s = v
        .iter()
        .take(SHOWN)
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if v.len() > SHOWN {
        s.push_str(&format!(" and {} more", v.len() - SHOWN));
    }
    s
}
