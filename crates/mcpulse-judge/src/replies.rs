//! A transcript with each reply decoded at most once, within a memory budget: what one
//! judgement reads.
//!
//! [`Exchange::reply`] parses the reply's JSON every time it is asked, and a judgement asks for
//! the same replies many times (the verdict, the inventory, the contract, the security rules,
//! the envelope check): a `tools/list` reply was parsed five times per probe, which was the
//! larger part of judging. A [`Replies`] is made once per judgement and passed to every part of
//! it; each reply is parsed the first time a part asks for it, and the view is dropped with the
//! judgement, so nothing is kept between judgements and nothing is shared between threads.
//!
//! Decoded replies cost far more memory than their text (see `mcpulse_wire::json`), so the view
//! holds them within bounds, the same for a live probe and a stored transcript:
//! - all the replies of one judgement together take at most [`budget`] estimated bytes (a
//!   multiple of the transcript's `--max-response-size`); a reply that would pass it is not
//!   decoded and its list fails with a finding saying so;
//! - a list keeps at most [`MAX_LIST_ITEMS`] items across its pages; the rest are skipped
//!   without being built, counted, and reported (`list-truncated`).

use mcpulse_wire::json::{JsonError, Limits};
use mcpulse_wire::jsonrpc::{self, DecodeError, Decoded};
use mcpulse_wire::transcript::{Exchange, Outcome, Step, Transcript};
use std::borrow::Cow;
use std::cell::{Cell, OnceCell};

/// The most items one list keeps, across its pages. Real servers list tens to hundreds of
/// tools; clients show the model about 128. The rest of a longer list is counted, not held.
pub const MAX_LIST_ITEMS: usize = 10_000;

/// Decoded replies of one judgement may take this many times `--max-response-size`
/// (estimated heap bytes)...
pub const BUDGET_MULTIPLE: usize = 8;
/// ...and at least this much, so that a small cap does not refuse a list of ordinary tools
/// (an ordinary tool with a small schema takes ~15× its text once decoded).
pub const BUDGET_FLOOR: usize = 64 << 20;

/// The memory budget for the decoded replies of a transcript made with a response cap of
/// `max_response_bytes`.
pub fn budget(max_response_bytes: usize) -> usize {
    max_response_bytes
        .saturating_mul(BUDGET_MULTIPLE)
        .max(BUDGET_FLOOR)
}

pub(crate) struct Replies<'t> {
    tr: &'t Transcript,
    /// One cell per exchange of `tr`, in the same order.
    decoded: Vec<OnceCell<Read>>,
    /// What is left of the budget.
    left: Cell<usize>,
}

/// One exchange's reply as read.
struct Read {
    reply: Result<Decoded, DecodeError>,
    /// Items of its list kept and skipped (list steps only).
    kept: usize,
    dropped: usize,
}

impl<'t> Replies<'t> {
    pub(crate) fn new(tr: &'t Transcript) -> Replies<'t> {
        Replies {
            tr,
            decoded: tr.exchanges.iter().map(|_| OnceCell::new()).collect(),
            left: Cell::new(budget(tr.plan.max_response_bytes)),
        }
    }

    pub(crate) fn transcript(&self) -> &'t Transcript {
        self.tr
    }

    /// [`Exchange::reply`] of `ex`, an exchange of this transcript, parsed at most once.
    ///
    /// An exchange from elsewhere (a caller's mistake: every caller in this crate takes its
    /// exchanges from [`Replies::transcript`]) is decoded afresh each time, never answered
    /// from another exchange's cell, and within the same bounds.
    pub(crate) fn of(&self, ex: &Exchange) -> Option<Cow<'_, Decoded>> {
        match self.read(ex) {
            Some(r) => r.reply.as_ref().ok().map(Cow::Borrowed),
            None => self.decode(ex, usize::MAX).reply.ok().map(Cow::Owned),
        }
    }

    /// [`Replies::of`] for an exchange of this transcript, borrowed for as long as the view
    /// lives; `None` for an exchange from elsewhere.
    pub(crate) fn cached(&self, ex: &Exchange) -> Option<&Decoded> {
        self.read(ex)?.reply.as_ref().ok()
    }

    /// Why the reply of `ex` could not be used although it was valid JSON (too deep, a number
    /// out of range, over the memory budget).
    pub(crate) fn defect(&self, ex: &Exchange) -> Option<JsonError> {
        let unusable = |r: &Result<Decoded, DecodeError>| match r {
            Err(DecodeError::Unusable(e)) => Some(e.clone()),
            _ => None,
        };
        match self.read(ex) {
            Some(r) => unusable(&r.reply),
            None => unusable(&self.decode(ex, usize::MAX).reply),
        }
    }

    /// The items of `step`'s list kept and skipped, over all its pages read.
    pub(crate) fn list_items(&self, step: Step) -> (usize, usize) {
        self.tr
            .exchanges
            .iter()
            .filter(|e| e.step == step)
            .filter_map(|e| self.read(e))
            .fold((0, 0), |(k, d), r| (k + r.kept, d + r.dropped))
    }

    fn read(&self, ex: &Exchange) -> Option<&Read> {
        let i = self.index(ex)?;
        let cell = self.decoded.get(i)?;
        if let Some(r) = cell.get() {
            return Some(r);
        }
        // A list keeps its first items: read the earlier pages first, to know how many are
        // left to keep (each is read once, so this recursion is shallow).
        let keep = match ex.step.list_key() {
            Some(_) => {
                let before = self.tr.exchanges.get(..i).unwrap_or_default();
                let kept: usize = before
                    .iter()
                    .filter(|e| e.step == ex.step)
                    .filter_map(|e| self.read(e))
                    .map(|r| r.kept)
                    .sum();
                MAX_LIST_ITEMS.saturating_sub(kept)
            }
            None => usize::MAX,
        };
        Some(cell.get_or_init(|| self.decode(ex, keep)))
    }

    /// Decodes the reply of `ex`, charging the budget.
    fn decode(&self, ex: &Exchange, keep: usize) -> Read {
        let raw = match ex.outcome {
            Outcome::Reply { frame } => ex.frames.get(frame).map(|f| f.raw.as_str()),
            _ => None,
        };
        let Some(raw) = raw else {
            return Read {
                reply: Err(DecodeError::NotJson),
                kept: 0,
                dropped: 0,
            };
        };
        let limits = Limits {
            budget: self.left.get(),
            list: ex.step.list_key().map(|k| (k, keep)),
        };
        match jsonrpc::decode_within(raw, &limits) {
            Ok((d, parsed)) => {
                self.left.set(self.left.get().saturating_sub(parsed.cost));
                Read {
                    reply: Ok(d),
                    kept: parsed.kept,
                    dropped: parsed.dropped,
                }
            }
            Err(e) => Read {
                reply: Err(e),
                kept: 0,
                dropped: 0,
            },
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

    /// The reply decoded in full, without bounds.
    fn full(e: &Exchange) -> Option<Decoded> {
        e.frames.first().and_then(|f| jsonrpc::decode(&f.raw).ok())
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
                assert_eq!(replies.of(e).as_deref(), full(e).as_ref());
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
        assert_eq!(replies.of(&stray).as_deref(), full(&stray).as_ref());
    }

    fn page(tools: usize) -> String {
        let items = vec![r#"{"name":"t"}"#; tools].join(",");
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{items}]}}}}"#)
    }

    /// A list keeps its first MAX_LIST_ITEMS items across its pages, in page order, whichever
    /// page is asked for first.
    #[test]
    fn a_list_keeps_its_first_items_across_pages() {
        let tr = transcript(vec![ex(&page(6_000)), ex(&page(6_000))]);
        let replies = Replies::new(&tr);
        let last = &tr.exchanges[1];
        let tools = |d: &Decoded| match &d.message {
            jsonrpc::Message::Result { result, .. } => result["tools"].as_array().map(Vec::len),
            _ => None,
        };
        assert_eq!(replies.cached(last).and_then(tools), Some(4_000));
        assert_eq!(
            replies.cached(&tr.exchanges[0]).and_then(tools),
            Some(6_000)
        );
        assert_eq!(replies.list_items(Step::ToolsList), (MAX_LIST_ITEMS, 2_000));
    }

    /// The replies of one judgement together stay within the budget; a reply past it is
    /// refused, and says so.
    #[test]
    fn replies_past_the_budget_are_refused() {
        // ~100 bytes of heap per byte of text: 1 MiB of tiny objects is over the 64 MiB floor.
        let objects = vec![r#"{"a":0}"#; 150_000].join(",");
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"x":[{objects}]}}}}"#);
        let mut small = ex(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#);
        small.step = Step::Initialize;
        let mut big = ex(&text);
        big.step = Step::Initialize;
        let tr = transcript(vec![small, big]);
        let replies = Replies::new(&tr);
        assert!(replies.of(&tr.exchanges[0]).is_some());
        assert!(replies.of(&tr.exchanges[1]).is_none());
        let defect = replies.defect(&tr.exchanges[1]).unwrap();
        assert_eq!(
            defect.kind,
            mcpulse_wire::json::JsonErrorKind::OverBudget {
                budget: budget(1 << 20) - replies_cost(&tr.exchanges[0])
            }
        );
    }

    fn replies_cost(e: &Exchange) -> usize {
        jsonrpc::decode_within(&e.frames[0].raw, &Limits::UNBOUNDED)
            .unwrap()
            .1
            .cost
    }
}
