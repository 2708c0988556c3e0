//! Whatever a server sends, the decoders never panic: arbitrary bytes, in arbitrary chunks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_wire::{auth, json, jsonrpc, ndjson, redact, sse, x509};
use proptest::prelude::*;

fn chunks(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = bytes;
    for c in cuts {
        if rest.is_empty() {
            break;
        }
        let n = (*c % rest.len()).max(1);
        out.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    out.push(rest.to_vec());
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn sse_decoder(bytes in prop::collection::vec(any::<u8>(), 0..2048), cuts in prop::collection::vec(any::<usize>(), 0..16), cap in 1usize..256) {
        let mut d = sse::Decoder::new(cap);
        for c in chunks(&bytes, &cuts) {
            for item in d.push(&c) {
                if let sse::Item::Event(e) = item {
                    prop_assert!(e.data.len() <= 3 * cap + 3, "data {} over cap {cap}", e.data.len());
                }
            }
        }
    }

    #[test]
    fn sse_decoder_on_event_shaped_text(text in "(((event|data|id|retry|:)[:]? ?[a-z0-9{}\":, ]{0,20})?(\r\n|\n|\r)){0,40}") {
        let mut d = sse::Decoder::new(64);
        let _ = d.push(text.as_bytes());
    }

    #[test]
    fn ndjson_decoder(bytes in prop::collection::vec(any::<u8>(), 0..2048), cuts in prop::collection::vec(any::<usize>(), 0..16), cap in 1usize..256) {
        let mut d = ndjson::LineDecoder::new(cap);
        for c in chunks(&bytes, &cuts) {
            for line in d.push(&c) {
                if let ndjson::Line::Text(t) = line {
                    prop_assert!(t.len() <= cap * 3 + 3, "line {} over cap {cap}", t.len()); // lossy UTF-8 may widen bytes
                }
            }
        }
        let _ = d.finish();
    }

    #[test]
    fn jsonrpc_decode(text in "\\PC{0,200}") {
        let _ = jsonrpc::decode(&text);
        let _ = jsonrpc::peek(&text);
        let _ = json::parse(&text, &json::Limits { budget: 256, list: Some(("tools", 1)) });
    }

    #[test]
    fn jsonrpc_decode_json_shaped(text in "\\{(\"(jsonrpc|id|method|result|error|code|message|params)\":(null|-?[0-9]{1,20}|\"[a-z]{0,5}\"|\\{\\}|\\[\\]|true),?){0,8}\\}") {
        let _ = jsonrpc::decode(&text);
        let _ = jsonrpc::peek(&text);
    }

    #[test]
    fn www_authenticate(text in "\\PC{0,200}") {
        let _ = auth::parse_challenges(&text);
        let _ = auth::resource_metadata(&text);
    }

    #[test]
    fn redaction(text in "\\PC{0,200}") {
        let _ = redact::url(&text);
        let argv: Vec<String> = text.split(' ').map(str::to_owned).collect();
        let mut secrets = redact::Secrets::default();
        secrets.add(argv.last().map_or("", String::as_str));
        let shown = redact::command_line(&argv, &secrets);
        // Hiding is idempotent: what is shown, shown again, is the same.
        let again: Vec<String> = shown.split(' ').map(str::to_owned).collect();
        prop_assert_eq!(redact::command_line(&again, &secrets), shown);
    }

    #[test]
    fn hiding_is_idempotent_and_leaves_no_secret(
        text in "[<>redact x]{0,48}",
        secrets in prop::collection::vec("[<>redact]{1,5}", 1..4),
    ) {
        let mut set = redact::Secrets::default();
        for s in &secrets {
            set.add(s);
        }
        let once = set.hide(&text);
        prop_assert_eq!(set.hide(&once), once.clone());
        for piece in once.split("<redacted>") {
            for s in &secrets {
                prop_assert!(!piece.contains(s.as_str()), "{s:?} shows in {once:?}");
            }
        }
    }

    #[test]
    fn certificates(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = x509::validity(&bytes);
    }
}
