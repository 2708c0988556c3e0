//! The inert-text rule holds for any input: no control, bidi or invisible character survives,
//! the length limit is never passed, and plain text comes back unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_wire::text;
use proptest::prelude::*;
use std::borrow::Cow;

/// Text heavy in what the rule is about: controls, C1, bidi, zero-width, tags, and plain text.
fn hostile() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            any::<char>(),
            prop::sample::select(vec![
                '\x1b',
                '\n',
                '\r',
                '\t',
                '\0',
                '\x07',
                '\u{7f}',
                '\u{85}',
                '\u{9b}',
                '\u{202e}',
                '\u{2066}',
                '\u{200f}',
                '\u{061c}',
                '\u{2028}',
                '\u{200b}',
                '\u{feff}',
                '\u{e0041}',
                '"',
                '\\',
                '=',
                ' ',
                ':',
                '#',
                '[',
                '\u{a0}',
                '…',
            ]),
            "[a-z ]{0,8}".prop_map(|s| s.chars().next().unwrap_or('a')),
        ],
        0..400,
    )
    .prop_map(|v| v.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn output_is_inert_and_within_the_limit(s in hostile(), max in 0usize..300) {
        let out = text::inert(&s, max);
        prop_assert!(!out.chars().any(text::is_escaped), "{out:?}");
        prop_assert!(out.chars().count() <= max, "{} > {max}: {out:?}", out.chars().count());
        let q = text::quoted(&s, max);
        prop_assert!(!q.chars().any(text::is_escaped), "{q:?}");
        prop_assert!(q.chars().count() <= max + 2);
        let v = text::log_value(&s);
        prop_assert!(!v.chars().any(text::is_escaped), "{v:?}");
        // No CI workflow command either.
        for t in [&*out, &*q, &*v] {
            prop_assert!(!t.trim_start().starts_with("::") && !t.contains("##[") && !t.contains("##vso["), "{t:?}");
        }
    }

    #[test]
    fn a_cut_keeps_a_prefix_and_ends_with_the_marker(s in hostile(), max in 1usize..300) {
        let full = text::inert(&s, usize::MAX);
        let out = text::inert(&s, max);
        if full.chars().count() <= max {
            prop_assert_eq!(&out, &full);
        } else {
            prop_assert!(out.ends_with(text::MARKER));
            let kept = out.strip_suffix(text::MARKER).unwrap_or(&out);
            prop_assert!(full.starts_with(kept));
        }
    }

    #[test]
    fn plain_text_is_unchanged_and_borrowed(s in "[a-zA-Z0-9 _./:@éü✔·-]{0,200}") {
        // A leading `::` is a CI workflow command, escaped (module docs).
        prop_assume!(!s.trim_start().starts_with("::"));
        let out = text::field(&s);
        prop_assert!(matches!(out, Cow::Borrowed(_)));
        prop_assert_eq!(out.as_ref(), s.as_str());
    }

    #[test]
    fn a_quoted_value_has_no_bare_quote_inside(s in hostile()) {
        let q = text::quoted(&s, text::MESSAGE_CHARS);
        let inside = &q[1..q.len() - 1];
        let mut chars = inside.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                chars.next();
            } else {
                prop_assert_ne!(c, '"', "{}", q);
            }
        }
    }
}
