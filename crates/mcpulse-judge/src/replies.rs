//! Each reply of a transcript decoded once per judgement.
//!
//! [`Exchange::reply`] parses the reply's JSON every time it is asked, and a judgement asks
//! for the same replies many times (the verdict, the inventory, the contract, the security
//! rules, the envelope check): a `tools/list` reply was parsed five times per probe, which was
//! the larger part of judging. Inside a [`Scope`], [`reply`] parses each reply text once and
//! hands out shared references to it. The memo is keyed by the text itself (decoding is a pure
//! function of it), so it can never answer for another text; it lives on this thread only while
//! the outermost scope does, so it holds nothing between judgements.

use mcpulse_wire::jsonrpc::Decoded;
use mcpulse_wire::transcript::{Exchange, Outcome};
use std::cell::RefCell;
use std::rc::Rc;

type Memo = Vec<(String, Option<Rc<Decoded>>)>;

thread_local! {
    static MEMO: RefCell<Option<Memo>> = const { RefCell::new(None) };
}

/// While a scope is alive on this thread, [`reply`] memoizes. Scopes nest; the outermost one
/// clears the memo when it ends.
pub(crate) struct Scope {
    outermost: bool,
}

impl Scope {
    pub(crate) fn enter() -> Scope {
        MEMO.with(|m| {
            let mut m = m.borrow_mut();
            let outermost = m.is_none();
            if outermost {
                *m = Some(Vec::new());
            }
            Scope { outermost }
        })
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.outermost {
            MEMO.with(|m| *m.borrow_mut() = None);
        }
    }
}

/// [`Exchange::reply`], parsed at most once per scope.
pub(crate) fn reply(ex: &Exchange) -> Option<Rc<Decoded>> {
    let Outcome::Reply { frame } = ex.outcome else {
        return None;
    };
    let raw = &ex.frames.get(frame)?.raw;
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        let Some(memo) = m.as_mut() else {
            return ex.reply().map(Rc::new);
        };
        if let Some((_, d)) = memo.iter().find(|(text, _)| text == raw) {
            return d.clone();
        }
        let d = ex.reply().map(Rc::new);
        memo.push((raw.clone(), d.clone()));
        d
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpulse_wire::jsonrpc::Message;
    use mcpulse_wire::transcript::{Frame, Request, Step, TransportKind};

    fn ex(raw: &str) -> Exchange {
        Exchange {
            step: Step::ToolsList,
            transport: TransportKind::StreamableHttp,
            era: None,
            page: None,
            at_ms: 0.0,
            id: Some(1),
            request: Request::default(),
            redirects: Vec::new(),
            response: None,
            frames: vec![Frame {
                at_ms: 0.0,
                raw: raw.into(),
                sse_event: None,
            }],
            body: None,
            body_bytes: 0,
            outcome: Outcome::Reply { frame: 0 },
            elapsed_ms: 0.0,
        }
    }

    #[test]
    fn memoized_replies_are_the_replies() {
        let a = ex(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#);
        let b = ex(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x"}]}}"#);
        let _scope = Scope::enter();
        for _ in 0..2 {
            for e in [&a, &b] {
                assert_eq!(reply(e).as_deref(), e.reply().as_ref());
            }
        }
        let first = reply(&a);
        assert!(first.is_some_and(|d| Rc::ptr_eq(&d, &reply(&a).unwrap_or_else(|| d.clone()))));
        assert!(matches!(
            reply(&b).as_deref().map(|d| &d.message),
            Some(Message::Result { .. })
        ));
    }

    #[test]
    fn no_memo_outside_a_scope() {
        let a = ex(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert_eq!(reply(&a).as_deref(), a.reply().as_ref());
        MEMO.with(|m| assert!(m.borrow().is_none()));
        {
            let _outer = Scope::enter();
            {
                let _inner = Scope::enter();
                reply(&a);
            }
            MEMO.with(|m| assert_eq!(m.borrow().as_ref().map(Vec::len), Some(1)));
        }
        MEMO.with(|m| assert!(m.borrow().is_none()));
    }
}
