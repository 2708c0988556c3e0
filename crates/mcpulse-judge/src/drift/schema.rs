//! Schema drift: a tool's input schema from the caller's side (what accepts less breaks old
//! calls) and its output schema from the consumer's side (what promises less breaks readers),
//! one function per JSON Schema concern, walked recursively through `properties` and `items`.
//! Whole items (added, removed, described, annotated) are `super`'s.

use super::{Diff, list, rest_diff};
use crate::evidence::strings;
use crate::rules::DriftRule;
use serde_json::{Map, Value};

/// The numeric bounds, and whether each is a lower one (raising it tightens).
const BOUNDS: &[(&str, bool)] = &[
    ("minimum", true),
    ("exclusiveMinimum", true),
    ("minLength", true),
    ("minItems", true),
    ("minProperties", true),
    ("maximum", false),
    ("exclusiveMaximum", false),
    ("maxLength", false),
    ("maxItems", false),
    ("maxProperties", false),
];

/// Keywords that restrict the values: adding or changing one tightens, removing it widens.
const CONSTRAINTS: &[&str] = &["pattern", "format", "const"];

/// Keywords a schema diff classifies itself; any other that changed is `other-changed`.
const HANDLED: &[&str] = &[
    "type",
    "enum",
    "additionalProperties",
    "properties",
    "required",
    "items",
    "description",
    "title",
    "anyOf",
    "oneOf",
];

type Object = Map<String, Value>;

/// Input schemas, from the caller's side: what accepts less breaks old calls.
pub(super) fn schema_diff(d: &mut Diff, path: &str, old: &Value, new: &Value) {
    if old == new {
        return;
    }
    if boolean_diff(d, path, old, new) {
        return;
    }
    let empty = Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    type_diff(d, path, old, new, o, n);
    enum_diff(d, path, o, n);
    additional_properties_diff(d, path, o, n);
    bounds_diff(d, path, o, n);
    parameter_text_diff(d, path, o, n);
    properties_diff(d, path, old, new, o, n);
    items_schema_diff(d, path, o, n);
    alternatives_diff(d, path, o, n);
    let handled: Vec<&str> = HANDLED
        .iter()
        .copied()
        .chain(BOUNDS.iter().map(|(k, _)| *k))
        .chain(CONSTRAINTS.iter().copied())
        .collect();
    rest_diff(d, path, o, n, &handled);
}

/// A boolean schema on either side (`true` accepts anything, `false` nothing; an object
/// schema is in between): judged here, as narrowed or widened. Whether it was one.
fn boolean_diff(d: &mut Diff, path: &str, old: &Value, new: &Value) -> bool {
    // How much each accepts: false < a schema < true (a schema of annotations only, `{}` or
    // `{"description": ...}`, accepts anything, as `true` does).
    const ANNOTATIONS: &[&str] = &[
        "description",
        "title",
        "$comment",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
    ];
    let rank = |v: &Value| match v {
        Value::Bool(false) => 0,
        Value::Bool(true) => 2,
        Value::Object(m) if m.keys().all(|k| ANNOTATIONS.contains(&k.as_str())) => 2,
        _ => 1,
    };
    if !old.is_boolean() && !new.is_boolean() {
        return false;
    }
    if rank(old) == 2 && rank(new) == 2 {
        // The same values either way: what changed, if anything, is text (the object side's
        // description), judged as any schema's.
        return false;
    }
    let (o, n) = (rank(old), rank(new));
    if n < o {
        d.push(
            DriftRule::TypeNarrowed,
            path.into(),
            Some(old),
            Some(new),
            if n == 0 {
                "the schema is now `false`: it accepts no value".into()
            } else {
                "the schema is no longer `true`: it accepts fewer values".into()
            },
        );
    } else if n > o {
        d.push(
            DriftRule::Widened,
            path.into(),
            Some(old),
            Some(new),
            "the schema accepts more values".into(),
        );
    }
    // `{}` to `true` (or back): the same values.
    true
}

/// `anyOf` / `oneOf`: alternatives only removed (or the list newly added) accept less, and
/// break old calls; only added (or the list removed) accept more; both at once cannot be told
/// without comparing the alternatives themselves, and are `other-changed`.
fn alternatives_diff(d: &mut Diff, path: &str, o: &Object, n: &Object) {
    for k in ["anyOf", "oneOf"] {
        let (ov, nv) = (o.get(k), n.get(k));
        if ov == nv {
            continue;
        }
        let set = |v: Option<&Value>| -> Option<std::collections::HashSet<String>> {
            v.and_then(Value::as_array)
                .map(|a| a.iter().map(Value::to_string).collect())
        };
        let (rule, message) = match (set(ov), set(nv)) {
            (Some(os), Some(ns)) => {
                let removed = os.difference(&ns).count();
                let added = ns.difference(&os).count();
                match (removed, added) {
                    (r, 0) if r > 0 => (
                        DriftRule::TypeNarrowed,
                        format!("{r} {k} alternative(s) removed"),
                    ),
                    (0, a) if a > 0 => {
                        (DriftRule::Widened, format!("{a} {k} alternative(s) added"))
                    }
                    _ => (
                        DriftRule::OtherChanged,
                        format!("{k} alternatives changed ({removed} removed, {added} added)"),
                    ),
                }
            }
            (None, Some(_)) => (
                DriftRule::TypeNarrowed,
                format!("a {k} now restricts the values"),
            ),
            (Some(_), None) => (
                DriftRule::Widened,
                format!("the {k} restriction was removed"),
            ),
            (None, None) => (DriftRule::OtherChanged, format!("{k} changed")),
        };
        d.push(rule, format!("{path}.{k}"), ov, nv, message);
    }
}

/// `type`: fewer accepted types is narrowed, more is widened.
fn type_diff(d: &mut Diff, path: &str, old: &Value, new: &Value, o: &Object, n: &Object) {
    match (types(old), types(new)) {
        (Some(ot), Some(nt)) if ot != nt => {
            if accepts(&nt, &ot) {
                d.push(
                    DriftRule::Widened,
                    format!("{path}.type"),
                    o.get("type"),
                    n.get("type"),
                    format!("type widened from {ot:?} to {nt:?}"),
                );
            } else {
                d.push(
                    DriftRule::TypeNarrowed,
                    format!("{path}.type"),
                    o.get("type"),
                    n.get("type"),
                    format!("type changed from {ot:?} to {nt:?}"),
                );
            }
        }
        (None, Some(nt)) => d.push(
            DriftRule::TypeNarrowed,
            format!("{path}.type"),
            None,
            n.get("type"),
            format!("type {nt:?} is now required"),
        ),
        (Some(_), None) => d.push(
            DriftRule::Widened,
            format!("{path}.type"),
            o.get("type"),
            None,
            "type constraint removed".into(),
        ),
        _ => {}
    }
}

/// `enum`: values removed (or an enum added) narrow, values added (or the enum removed) widen.
fn enum_diff(d: &mut Diff, path: &str, o: &Object, n: &Object) {
    match (
        o.get("enum").and_then(Value::as_array),
        n.get("enum").and_then(Value::as_array),
    ) {
        (Some(oe), Some(ne)) => {
            // Sets of their JSON text (a contract's values have one spelling): linear, where
            // `contains` was quadratic on enums of 100,000 values.
            let set = |e: &[Value]| {
                e.iter()
                    .map(Value::to_string)
                    .collect::<std::collections::HashSet<String>>()
            };
            let (os, ns) = (set(oe), set(ne));
            let removed: Vec<&Value> = oe.iter().filter(|v| !ns.contains(&v.to_string())).collect();
            let added: Vec<&Value> = ne.iter().filter(|v| !os.contains(&v.to_string())).collect();
            if !removed.is_empty() {
                d.push(
                    DriftRule::EnumNarrowed,
                    format!("{path}.enum"),
                    o.get("enum"),
                    n.get("enum"),
                    format!("enum values removed: {}", list(&removed)),
                );
            }
            if !added.is_empty() {
                d.push(
                    DriftRule::Widened,
                    format!("{path}.enum"),
                    o.get("enum"),
                    n.get("enum"),
                    format!("enum values added: {}", list(&added)),
                );
            }
        }
        (None, Some(_)) => d.push(
            DriftRule::EnumNarrowed,
            format!("{path}.enum"),
            None,
            n.get("enum"),
            "an enum now restricts the values".into(),
        ),
        (Some(_), None) => d.push(
            DriftRule::Widened,
            format!("{path}.enum"),
            o.get("enum"),
            None,
            "the enum restriction was removed".into(),
        ),
        _ => {}
    }
}

/// `additionalProperties`: closing it rejects the extra arguments old calls may send.
fn additional_properties_diff(d: &mut Diff, path: &str, o: &Object, n: &Object) {
    let closed =
        |m: &Map<String, Value>| m.get("additionalProperties") == Some(&Value::Bool(false));
    if !closed(o) && closed(n) {
        d.push(
            DriftRule::AdditionalPropertiesClosed,
            format!("{path}.additionalProperties"),
            o.get("additionalProperties"),
            n.get("additionalProperties"),
            "additionalProperties is now false: extra arguments are rejected".into(),
        );
    } else if closed(o) && !closed(n) {
        d.push(
            DriftRule::Widened,
            format!("{path}.additionalProperties"),
            o.get("additionalProperties"),
            n.get("additionalProperties"),
            "additionalProperties opened".into(),
        );
    } else if o.get("additionalProperties") != n.get("additionalProperties") {
        d.push(
            DriftRule::OtherChanged,
            format!("{path}.additionalProperties"),
            o.get("additionalProperties"),
            n.get("additionalProperties"),
            "additionalProperties changed".into(),
        );
    }
}

/// Numeric bounds and value constraints: tightened breaks, loosened widens.
fn bounds_diff(d: &mut Diff, path: &str, o: &Object, n: &Object) {
    for &(k, lower) in BOUNDS {
        let (ov, nv) = (
            o.get(k).and_then(Value::as_f64),
            n.get(k).and_then(Value::as_f64),
        );
        let tighter = match (ov, nv) {
            (None, Some(_)) => Some(true),
            (Some(_), None) => Some(false),
            (Some(a), Some(b)) if a != b => Some(if lower { b > a } else { b < a }),
            _ => None,
        };
        match tighter {
            Some(true) => d.push(
                DriftRule::ConstraintTightened,
                format!("{path}.{k}"),
                o.get(k),
                n.get(k),
                format!("{k} tightened"),
            ),
            Some(false) => d.push(
                DriftRule::Widened,
                format!("{path}.{k}"),
                o.get(k),
                n.get(k),
                format!("{k} loosened"),
            ),
            None => {}
        }
    }
    for &k in CONSTRAINTS {
        match (o.get(k), n.get(k)) {
            (a, Some(b)) if a != Some(b) => d.push(
                DriftRule::ConstraintTightened,
                format!("{path}.{k}"),
                a,
                Some(b),
                format!("{k} added or changed"),
            ),
            (Some(a), None) => d.push(
                DriftRule::Widened,
                format!("{path}.{k}"),
                Some(a),
                None,
                format!("{k} removed"),
            ),
            _ => {}
        }
    }
}

/// A schema's description or title, a parameter's or the whole schema's: what the model reads.
fn parameter_text_diff(d: &mut Diff, path: &str, o: &Object, n: &Object) {
    for k in ["description", "title"] {
        if o.get(k) != n.get(k) {
            let code = if k == "description" {
                DriftRule::DescriptionChanged
            } else {
                DriftRule::TitleChanged
            };
            d.push(
                code,
                format!("{path}.{k}"),
                o.get(k),
                n.get(k),
                if path.contains(".properties.") {
                    format!("parameter {k} changed")
                } else {
                    format!("the schema's {k} changed")
                },
            );
        }
    }
}

/// Parameters removed, renamed, added (required or optional), newly required or no longer,
/// then each kept parameter's own schema.
fn properties_diff(d: &mut Diff, path: &str, old: &Value, new: &Value, o: &Object, n: &Object) {
    let empty = Map::new();
    let (op, np) = (properties(o, &empty), properties(n, &empty));
    let (oreq, nreq) = (required(old), required(new));
    let removed: Vec<&String> = op.keys().filter(|k| !np.contains_key(*k)).collect();
    let added: Vec<&String> = np.keys().filter(|k| !op.contains_key(*k)).collect();
    let mut renamed_to: Vec<&String> = Vec::new();
    for r in &removed {
        // A removed parameter whose exact schema reappears under a new name: a rename.
        let twin = added
            .iter()
            .find(|a| !renamed_to.contains(a) && np.get(a.as_str()) == op.get(r.as_str()));
        match twin {
            Some(a) => {
                renamed_to.push(a);
                d.push(
                    DriftRule::ParameterRenamed,
                    format!("{path}.properties.{r}"),
                    Some(&Value::String((*r).clone())),
                    Some(&Value::String((*a).clone())),
                    format!("parameter {r:?} was renamed to {a:?}"),
                );
            }
            None => d.push(
                DriftRule::ParameterRemoved,
                format!("{path}.properties.{r}"),
                op.get(r.as_str()),
                None,
                format!("parameter {r:?} was removed"),
            ),
        }
    }
    for a in &added {
        if renamed_to.contains(a) {
            continue;
        }
        if nreq.contains(a) {
            d.push(
                DriftRule::RequiredParameterAdded,
                format!("{path}.properties.{a}"),
                None,
                np.get(a.as_str()),
                format!("required parameter {a:?} was added"),
            );
        } else {
            d.push(
                DriftRule::OptionalParameterAdded,
                format!("{path}.properties.{a}"),
                None,
                np.get(a.as_str()),
                format!("optional parameter {a:?} was added"),
            );
        }
    }
    for r in &nreq {
        // A parameter added as required was reported above; one required without being
        // declared (valid JSON Schema: the call must carry it) is new to old calls too.
        let added_here = np.contains_key(r) && !op.contains_key(r);
        if !added_here && !oreq.contains(r) {
            d.push(
                DriftRule::RequiredParameterAdded,
                format!("{path}.required"),
                None,
                Some(&Value::String(r.clone())),
                format!("parameter {r:?} is now required"),
            );
        }
    }
    for r in &oreq {
        let removed_here = op.contains_key(r) && !np.contains_key(r);
        if !nreq.contains(r) && !removed_here {
            d.push(
                DriftRule::Widened,
                format!("{path}.required"),
                Some(&Value::String(r.clone())),
                None,
                format!("parameter {r:?} is no longer required"),
            );
        }
    }
    for (k, ov) in op {
        if let Some(nv) = np.get(k) {
            schema_diff(d, &format!("{path}.properties.{k}"), ov, nv);
        }
    }
}

/// An array's `items` schema.
fn items_schema_diff(d: &mut Diff, path: &str, o: &Object, n: &Object) {
    if let (Some(oi), Some(ni)) = (o.get("items"), n.get("items")) {
        schema_diff(d, &format!("{path}.items"), oi, ni);
    } else if o.get("items") != n.get("items") {
        d.push(
            DriftRule::OtherChanged,
            format!("{path}.items"),
            o.get("items"),
            n.get("items"),
            "items schema added or removed".into(),
        );
    }
}

/// Output schemas, from the consumer's side: anything that stops promising what it promised
/// breaks the consumer.
pub(super) fn output_diff(d: &mut Diff, path: &str, old: Option<&Value>, new: Option<&Value>) {
    match (old, new) {
        (None, None) => {}
        (Some(o), None) => d.push(
            DriftRule::OutputSchemaChanged,
            path.into(),
            Some(o),
            None,
            "the output schema was removed".into(),
        ),
        (None, Some(n)) => d.push(
            DriftRule::OtherChanged,
            path.into(),
            None,
            Some(n),
            "an output schema was added".into(),
        ),
        (Some(o), Some(n)) if o == n => {}
        (Some(o), Some(n)) => {
            let before = d.changes.len();
            output_walk(d, path, o, n);
            if d.changes.len() == before {
                d.push(
                    DriftRule::OtherChanged,
                    path.into(),
                    Some(o),
                    Some(n),
                    "the output schema changed compatibly".into(),
                );
            }
        }
    }
}

fn output_walk(d: &mut Diff, path: &str, o: &Value, n: &Value) {
    if let (Some(ot), Some(nt)) = (types(o), types(n))
        && ot != nt
    {
        d.push(
            DriftRule::OutputSchemaChanged,
            format!("{path}.type"),
            o.get("type"),
            n.get("type"),
            format!("output type changed from {ot:?} to {nt:?}"),
        );
    }
    let empty = Map::new();
    let (o_obj, n_obj) = (
        o.as_object().unwrap_or(&empty),
        n.as_object().unwrap_or(&empty),
    );
    let (op, np) = (properties(o_obj, &empty), properties(n_obj, &empty));
    for (k, ov) in op {
        match np.get(k) {
            None => d.push(
                DriftRule::OutputSchemaChanged,
                format!("{path}.properties.{k}"),
                Some(ov),
                None,
                format!("output property {k:?} was removed"),
            ),
            Some(nv) if nv != ov => output_walk(d, &format!("{path}.properties.{k}"), ov, nv),
            _ => {}
        }
    }
    // An array's items: what a reader takes out of each element.
    if let (Some(oi), Some(ni)) = (o_obj.get("items"), n_obj.get("items"))
        && oi != ni
        && oi.is_object()
        && ni.is_object()
    {
        output_walk(d, &format!("{path}.items"), oi, ni);
    }
    let (oreq, nreq) = (required(o), required(n));
    for r in &oreq {
        if !nreq.contains(r) {
            d.push(
                DriftRule::OutputSchemaChanged,
                format!("{path}.required"),
                Some(&Value::String(r.clone())),
                None,
                format!("output property {r:?} is no longer guaranteed"),
            );
        }
    }
}

fn types(s: &Value) -> Option<Vec<String>> {
    match s.get("type")? {
        Value::String(t) => Some(vec![t.clone()]),
        Value::Array(a) => Some(
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        ),
        _ => None,
    }
}

/// Does type set `a` accept everything `b` accepts? (`number` accepts `integer`.)
fn accepts(a: &[String], b: &[String]) -> bool {
    b.iter()
        .all(|t| a.contains(t) || (t == "integer" && a.iter().any(|x| x == "number")))
}

fn required(s: &Value) -> Vec<String> {
    strings(s.get("required"))
}

/// A schema's `properties`, or `empty` when it has none.
fn properties<'a>(schema: &'a Object, empty: &'a Object) -> &'a Object {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(empty)
}
