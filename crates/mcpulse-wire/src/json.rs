//! Reading a server's JSON text into a value with bounded memory, and saying exactly why a text
//! could not be read.
//!
//! A `serde_json::Value` costs far more than the text it comes from: an object is a B-tree node
//! of about 600 bytes however few members it has, so `{"a":0}` (7 bytes of text) takes ~100×
//! its size, and a `tools/list` page of 640,000 minimal tools under the 8 MiB response cap took
//! 2 GB. Every value read here is charged against a budget *while* it is built, by an estimate
//! of its heap cost ([`Cost`]), and reading stops with [`JsonErrorKind::OverBudget`] the moment
//! the budget is spent: no DOM larger than the budget is ever held.
//!
//! One array may also be capped ([`Limits::list`]): a list reply's `result.<key>` keeps its
//! first items and skips the rest without building them, counting them ([`Parsed::dropped`]).
//!
//! Errors say what was wrong and where: nesting deeper than [`MAX_DEPTH`], a number out of range
//! (`1e999999` is valid JSON that no `f64` holds), the budget, or a syntax error. Deciding what
//! that means for a server is the judge's business; this module only reads.
//!
//! It owns no I/O and no policy: the budgets are the caller's.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::Cell;
use std::fmt;

/// The deepest nesting of arrays and objects that can be read: serde_json's own recursion limit
/// (it refuses the 128th level of nesting).
pub const MAX_DEPTH: usize = 127;

/// What a read may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most estimated heap bytes the value may take ([`Cost`]).
    pub budget: usize,
    /// Keep at most this many items of the array at `result.<key>` (the items of a list reply);
    /// the rest are skipped unbuilt and counted in [`Parsed::dropped`].
    pub list: Option<(&'static str, usize)>,
}

impl Limits {
    /// No budget and no list cap: only depth and numbers are checked.
    pub const UNBOUNDED: Limits = Limits {
        budget: usize::MAX,
        list: None,
    };
}

/// A value read within its limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub value: Value,
    /// The estimated heap bytes the value takes.
    pub cost: usize,
    /// Items of the capped list that were kept.
    pub kept: usize,
    /// Items of the capped list that were skipped.
    pub dropped: usize,
}

/// Why a text could not be read, and where (1-based line and column of the text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at line {line} column {column}")]
pub struct JsonError {
    pub kind: JsonErrorKind,
    pub line: usize,
    pub column: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonErrorKind {
    /// Valid JSON, nested deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// Valid JSON, with a number no `f64` holds (`1e999999`).
    #[error("a number out of range")]
    NumberOutOfRange,
    /// Holding the value would take more than the budget.
    #[error("holding it would take more than {budget} bytes of memory")]
    OverBudget { budget: usize },
    /// Not JSON: serde_json's description.
    #[error("{0}")]
    Syntax(String),
}

impl JsonError {
    /// Whether the text is valid JSON that was refused for its shape or size (not a syntax
    /// error): a server that sent it sent JSON, just not usable JSON.
    pub fn is_valid_json(&self) -> bool {
        !matches!(self.kind, JsonErrorKind::Syntax(_))
    }
}

/// The estimated heap cost of the parts of a `serde_json::Value`, with serde_json's default
/// (B-tree) map: every value slot is 32 bytes, an object is B-tree nodes of 11 members each
/// (about 600 bytes, allocated whole even for one member; none for no member), an array grows its buffer by
/// doubling, and a string or key owns its bytes. Each allocation also costs the allocator about
/// 16 bytes. An estimate, within tens of percent of what the allocator is asked for.
pub struct Cost;

impl Cost {
    /// A value's slot (in its array, map or parent), what every value costs besides its heap.
    pub const SLOT: usize = 32;
    const ALLOC: usize = 16;
    const NODE: usize = 11 * (24 + Self::SLOT) + 48;

    pub fn string(len: usize) -> usize {
        if len == 0 { 0 } else { len + Self::ALLOC }
    }

    /// An object's nodes, for `members` members (not counting keys and values). An empty
    /// object allocates nothing.
    pub fn object(members: usize) -> usize {
        // Members arrive in any order, so nodes are between half and fully filled.
        let nodes = members.saturating_mul(2).div_ceil(11);
        nodes.saturating_mul(Self::NODE + Self::ALLOC)
    }

    /// An array's buffer after `len` pushes.
    pub fn array(len: usize) -> usize {
        if len == 0 {
            0
        } else {
            len.next_power_of_two()
                .max(4)
                .saturating_mul(Self::SLOT)
                .saturating_add(Self::ALLOC)
        }
    }
}

/// Reads `text` as JSON within `limits`.
pub fn parse(text: &str, limits: &Limits) -> Result<Parsed, JsonError> {
    let state = State {
        left: Cell::new(limits.budget.saturating_sub(Cost::SLOT)),
        list: limits.list,
        kept: Cell::new(0),
        dropped: Cell::new(0),
        over: Cell::new(false),
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Build {
        state: &state,
        role: Role::Top,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v))
    .map_err(|e| classify(&e, &state, limits.budget))?;
    Ok(Parsed {
        value,
        cost: limits.budget - state.left.get(),
        kept: state.kept.get(),
        dropped: state.dropped.get(),
    })
}

fn classify(e: &serde_json::Error, state: &State, budget: usize) -> JsonError {
    let message = e.to_string();
    // serde_json names its errors in their messages only (the codes are private); the wire
    // tests pin these two.
    let kind = if state.over.get() {
        JsonErrorKind::OverBudget { budget }
    } else if message.starts_with("recursion limit exceeded") {
        JsonErrorKind::TooDeep
    } else if message.starts_with("number out of range") {
        JsonErrorKind::NumberOutOfRange
    } else {
        let bare = match message.rfind(" at line ") {
            Some(i) if e.line() > 0 => message.get(..i).unwrap_or(&message).to_owned(),
            _ => message,
        };
        JsonErrorKind::Syntax(bare)
    };
    JsonError {
        kind,
        line: e.line(),
        column: e.column(),
    }
}

struct State {
    left: Cell<usize>,
    list: Option<(&'static str, usize)>,
    kept: Cell<usize>,
    dropped: Cell<usize>,
    over: Cell<bool>,
}

impl State {
    fn charge<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        match self.left.get().checked_sub(bytes) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.over.set(true);
                Err(E::custom("over the memory budget"))
            }
        }
    }
}

/// Where a value is: the list cap applies to `result.<key>` of the top-level object only.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Top,
    Result,
    List,
    Other,
}

struct Build<'s> {
    state: &'s State,
    role: Role,
}

impl<'de> DeserializeSeed<'de> for Build<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Build<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.state.charge(Cost::string(v.len()))?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.state.charge(Cost::string(v.len()))?;
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let state = self.state;
        let keep = match (self.role, state.list) {
            (Role::List, Some((_, keep))) => keep,
            _ => usize::MAX,
        };
        let mut items = Vec::new();
        loop {
            if items.len() >= keep {
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    state.dropped.set(state.dropped.get().saturating_add(1));
                }
                break;
            }
            let item = Build {
                state,
                role: Role::Other,
            };
            match seq.next_element_seed(item)? {
                Some(v) => {
                    // Growing the buffer to the next power of two: charge the difference.
                    let grow =
                        Cost::array(items.len() + 1).saturating_sub(Cost::array(items.len()));
                    state.charge(grow)?;
                    items.push(v);
                }
                None => break,
            }
        }
        if self.role == Role::List {
            state.kept.set(state.kept.get().saturating_add(items.len()));
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let state = self.state;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let role = match (self.role, state.list) {
                (Role::Top, _) if key == "result" => Role::Result,
                (Role::Result, Some((list, _))) if key == list => Role::List,
                _ => Role::Other,
            };
            state.charge(Cost::string(key.len()))?;
            let grow = Cost::object(out.len() + 1).saturating_sub(Cost::object(out.len()));
            state.charge(grow)?;
            let v = map.next_value_seed(Build { state, role })?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn reads_what_serde_json_reads() {
        for text in [
            r#"{"a":[1,2.5,-3,"x",null,true,{"b":{}}],"c":"é\n"}"#,
            "[]",
            "0",
            r#""s""#,
            "18446744073709551615",
        ] {
            let want: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                parse(text, &Limits::UNBOUNDED).unwrap().value,
                want,
                "{text}"
            );
        }
    }

    #[test]
    fn says_what_was_wrong_and_where() {
        let e = parse(r#"{"x":[1, 1e999999]}"#, &Limits::UNBOUNDED).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::NumberOutOfRange);
        assert_eq!((e.line, e.column), (1, 17));
        assert_eq!(e.to_string(), "a number out of range at line 1 column 17");
        assert!(parse(&nested(MAX_DEPTH), &Limits::UNBOUNDED).is_ok());
        let e = parse(&nested(MAX_DEPTH + 1), &Limits::UNBOUNDED).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::TooDeep);
        assert_eq!(
            e.to_string(),
            format!(
                "nesting deeper than 127 levels at line 1 column {}",
                MAX_DEPTH + 1
            )
        );
        let e = parse(&nested(100_000), &Limits::UNBOUNDED).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::TooDeep);
        let e = parse("{\"a\":\n tru}", &Limits::UNBOUNDED).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::Syntax("expected ident".into()));
        assert!(!e.is_valid_json());
        let e = parse("{} x", &Limits::UNBOUNDED).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::Syntax("trailing characters".into()));
    }

    #[test]
    fn the_budget_stops_the_build() {
        let text = format!("[{}{{}}]", "{\"a\":0},".repeat(10_000));
        let all = parse(&text, &Limits::UNBOUNDED).unwrap();
        // About 100 bytes of heap per byte of text.
        assert!(
            all.cost > 60 * text.len(),
            "{} for {}",
            all.cost,
            text.len()
        );
        let limits = Limits {
            budget: 20 * text.len(),
            list: None,
        };
        let e = parse(&text, &limits).unwrap_err();
        assert_eq!(
            e.kind,
            JsonErrorKind::OverBudget {
                budget: 20 * text.len()
            }
        );
        assert!(e.is_valid_json());
        // A long string costs its length.
        let s = format!("\"{}\"", "x".repeat(1 << 20));
        let p = parse(&s, &Limits::UNBOUNDED).unwrap();
        assert!(p.cost < (1 << 20) + 100);
    }

    #[test]
    fn the_list_keeps_its_first_items() {
        let text =
            r#"{"id":1,"tools":[1],"result":{"next":[1,2,3],"tools":[{"n":1},{"n":2},{"n":[3]}]}}"#;
        let limits = Limits {
            budget: usize::MAX,
            list: Some(("tools", 2)),
        };
        let p = parse(text, &limits).unwrap();
        assert_eq!(
            p.value,
            serde_json::json!({"id":1,"tools":[1],"result":{"next":[1,2,3],"tools":[{"n":1},{"n":2}]}})
        );
        assert_eq!((p.kept, p.dropped), (2, 1));
    }
}
