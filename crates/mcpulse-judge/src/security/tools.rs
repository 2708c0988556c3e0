//! The tool-surface checks: hidden Unicode, look-alike names, instructions aimed at the model,
//! destructive tools without the annotation that says so, and too many tools.

use super::{Ctx, SecRule};
use crate::drift::is_hidden_char;
use crate::rules::security::{DESTRUCTIVE_WORDS, INJECTION_PATTERNS};
use serde_json::Value;

pub(super) fn tool_rules(c: &mut Ctx<'_>, tools: &[&Value]) {
    let text = |t: &Value, k: &str| t.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    for t in tools {
        let name = text(t, "name");
        let fields = [
            ("name", name.clone()),
            ("title", text(t, "title")),
            ("description", text(t, "description")),
        ];
        for (field, v) in &fields {
            // Joiners (U+200C, U+200D) are part of emoji and of Persian and Indic scripts: only
            // suspicious in a name.
            let n = v
                .chars()
                .filter(|ch| {
                    is_hidden_char(*ch)
                        && (*field == "name" || !matches!(ch, '\u{200C}' | '\u{200D}'))
                })
                .count();
            if n > 0 {
                c.add(
                    SecRule::HiddenUnicode,
                    format!("tool {name:?}: {n} hidden Unicode character(s) in its {field}"),
                    vec![format!("tools/list: {name}.{field}")],
                );
            }
        }
        if name.chars().any(|ch| ch.is_ascii_alphabetic()) && name.chars().any(is_confusable) {
            c.add(SecRule::Homoglyph, format!("tool name {name:?} contains non-ASCII letters (possible look-alike of another name)"), vec![format!("tools/list: {name}")]);
        }
        let desc = text(t, "description").to_lowercase();
        if let Some(p) = INJECTION_PATTERNS.iter().find(|p| desc.contains(*p)) {
            c.add(
                SecRule::PromptInjection,
                format!("tool {name:?}: its description contains {p:?}"),
                vec![format!("tools/list: {name}.description")],
            );
        }
        let words: Vec<String> = name
            .split(|ch: char| !ch.is_ascii_alphanumeric())
            .flat_map(split_camel)
            .map(|w| w.to_lowercase())
            .collect();
        if words
            .iter()
            .any(|w| DESTRUCTIVE_WORDS.contains(&w.as_str()))
        {
            let ann = t.get("annotations");
            let declared = ann.and_then(|a| a.get("destructiveHint")).is_some();
            let read_only = ann.and_then(|a| a.get("readOnlyHint")) == Some(&Value::Bool(true));
            if !declared || read_only {
                let why = if read_only {
                    "declares readOnlyHint: true"
                } else {
                    "does not declare destructiveHint"
                };
                c.add(
                    SecRule::DestructiveUnannotated,
                    format!("tool {name:?} looks destructive but {why}"),
                    vec![format!("tools/list: {name}.annotations")],
                );
            }
        }
    }
    if tools.len() > 100 {
        c.add(
            SecRule::ExcessiveTools,
            format!("{} tools", tools.len()),
            vec!["tools/list".into()],
        );
    }
}

/// Letters that pass for Latin ones: Cyrillic, Greek and full-width forms.
fn is_confusable(ch: char) -> bool {
    matches!(ch, '\u{0370}'..='\u{03FF}' | '\u{0400}'..='\u{04FF}' | '\u{FF01}'..='\u{FF5E}')
}

fn split_camel(word: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in word.chars() {
        if ch.is_ascii_uppercase() && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(ch);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}
