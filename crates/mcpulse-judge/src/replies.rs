//! A transcript with each reply decoded at most once: what one judgement reads.
//!
//! [`Exchange::reply`] parses the reply's JSON every time it is asked, and a judgement asks for
//! the same replies many times (the verdict, the inventory, the contract, the security rules,
//! the envelope check): a `tools/list` reply was parsed five times per probe, which was the
//! larger part of judging. A [`Replies`] is made once per judgement and passed to every part of
//! it; each reply is parsed the first time a part asks for it, and the view is dropped with the
//! judgement, so nothing is kept between judgements and nothing is shared between threads.

use mcpulse_wire::jsonrpc::Decoded;
use mcpulse_wire::transcript::{Exchange, Transcript};
use std::borrow::Cow;
use std::cell::OnceCell;

pub(crate) struct Replies<'t> {
    tr: &'t Transcript,
    /// One cell per exchange of `tr`, in the same order.
    decoded: Vec<OnceCell<Option<Decoded>>>,
}

impl<'t> Replies<'t> {
    pub(crate) fn new(tr: &'t Transcript) -> Replies<'t> {
        Replies {
            tr,
            decoded: tr.exchanges.iter().map(|_| OnceCell::new()).collect(),
        }
    }

    pub(crate) fn transcript(&self) -> &'t Transcript {
        self.tr
    }

    /// [`Exchange::reply`] of `ex`, an exchange of this transcript, parsed at most once.
    ///
    /// An exchange from elsewhere (a caller's mistake: every caller in this crate takes its
    /// exchanges from [`Replies::transcript`]) is decoded afresh each time, never answered
    /// from another exchange's cell.
    pub(crate) fn of(&self, ex: &Exchange) -> Option<Cow<'_, Decoded>> {
        match self.index(ex).and_then(|i| self.decoded.get(i)) {
            Some(cell) => cell.get_or_init(|| ex.reply()).as_ref().map(Cow::Borrowed),
            None => ex.reply().map(Cow::Owned),
        }
    }

    /// Where `ex` is in the transcript's exchanges, found from its address (a judgement asks
    /// for every reply, and a stored transcript may hold any number of exchanges: a search
    /// would make that quadratic).
    fn index(&self, ex: &Exchange) -> Option<usize> {
        let size = std::mem::size_of::<Exchange>().max(1);
        let offset = (ex as *const Exchange)
            .addr()
            .checked_sub(self.tr.exchanges.as_ptr().addr())?;
        let i = offset / size;
        let at = self.tr.exchanges.get(i)?;
        (offset % size == 0 && std::ptr::eq(at, ex)).then_some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpulse_wire::transcript::{
        Frame, Outcome, PlanRecord, Request, Step, TargetKind, TargetRecord, TransportKind,
    };
    use mcpulse_wire::version::EraMode;

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

    fn transcript(exchanges: Vec<Exchange>) -> Transcript {
        let target = TargetRecord {
            display: "t".into(),
            kind: TargetKind::Http,
            host: None,
        };
        let plan = PlanRecord {
            era: EraMode::Auto,
            security: false,
            credentials: false,
            timeout_ms: 1000,
            max_response_bytes: 1 << 20,
        };
        let mut tr = Transcript::new(target, plan, 0);
        tr.exchanges = exchanges;
        tr
    }

    #[test]
    fn each_reply_is_its_own_and_decoded_once() {
        let a = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
        let b = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x"}]}}"#;
        let tr = transcript(vec![ex(a), ex(b), ex(a), ex("not json")]);
        let replies = Replies::new(&tr);
        for _ in 0..2 {
            for e in &tr.exchanges {
                assert_eq!(replies.of(e).as_deref(), e.reply().as_ref());
            }
        }
        // The same text in two exchanges is two cells: each answers for its own exchange.
        for (i, e) in tr.exchanges.iter().enumerate() {
            let (Some(Cow::Borrowed(first)), Some(Cow::Borrowed(again))) =
                (replies.of(e), replies.of(e))
            else {
                assert_eq!(i, 3, "only the non-JSON reply has nothing to share");
                continue;
            };
            assert!(std::ptr::eq(first, again), "exchange {i} was decoded twice");
        }
    }

    #[test]
    fn a_stray_exchange_is_decoded_afresh() {
        let tr = transcript(vec![ex(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)]);
        let stray = ex(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#);
        let replies = Replies::new(&tr);
        assert!(matches!(replies.of(&stray), Some(Cow::Owned(_))));
        assert_eq!(replies.of(&stray).as_deref(), stray.reply().as_ref());
    }
}
