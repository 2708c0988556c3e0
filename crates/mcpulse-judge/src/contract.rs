//! A server's contract: its tools, prompts, resources and resource templates as the full
//! objects it sent, and the server-level facts, in a canonical form with digests.
//!
//! Canonical means: keys sorted, numbers in one spelling (`1.0`, `1e0` and `1` are the same
//! number), local `$ref`s (`#/...`) inside schemas resolved, and transport or cache fields
//! (`ttlMs`, `cacheScope`, `nextCursor`, the result's `_meta`) left out, because they say
//! nothing about the contract. Items keep everything else, unknown keys included, so a diff can
//! say exactly what changed. Digests are SHA-256 of the canonical JSON text.
//!
//! The contract is taken from a transcript (record, then judge), so a stored transcript yields
//! the same contract as the live probe did.

use crate::evidence::strings;
use crate::replies::Replies;
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::transcript::{Step, Transcript};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

pub const SCHEMA: &str = "mcpulse.contract/v1";

/// The baseline file's content (`mcpulse snapshot`), and what `mcpulse diff` compares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contract {
    pub schema: String,
    /// The target as launched (URL or command line): a baseline's identity, not the server's
    /// self-reported name.
    pub target: String,
    /// Digest of everything below.
    pub digest: String,
    pub server: ServerFacts,
    pub tools: Vec<Item>,
    pub prompts: Vec<Item>,
    pub resources: Vec<Item>,
    pub resource_templates: Vec<Item>,
}

/// Server-level facts that belong to the contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerFacts {
    pub era: Option<String>,
    pub protocol_version: Option<String>,
    pub supported_versions: Vec<String>,
    pub capabilities: Value,
    pub instructions: Option<String>,
    /// `serverInfo` (self-reported; a changed version is information, not drift).
    pub server_info: Value,
    pub digest: String,
}

/// One tool, prompt, resource or template: its key, digest and full canonical definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// `name` for tools and prompts, `uri` for resources, `uriTemplate` for templates.
    pub key: String,
    pub digest: String,
    pub definition: Value,
}

/// The four kinds of item, with the field that keys each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tool,
    Prompt,
    Resource,
    ResourceTemplate,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Tool,
        Kind::Prompt,
        Kind::Resource,
        Kind::ResourceTemplate,
    ];

    pub fn key_field(self) -> &'static str {
        match self {
            Kind::Tool | Kind::Prompt => "name",
            Kind::Resource => "uri",
            Kind::ResourceTemplate => "uriTemplate",
        }
    }
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Prompt => "prompt",
            Kind::Resource => "resource",
            Kind::ResourceTemplate => "resource template",
        }
    }
    /// The section of the contract (and the JSON path prefix in diffs).
    pub fn section(self) -> &'static str {
        match self {
            Kind::Tool => "tools",
            Kind::Prompt => "prompts",
            Kind::Resource => "resources",
            Kind::ResourceTemplate => "resource_templates",
        }
    }
    fn step(self) -> Step {
        match self {
            Kind::Tool => Step::ToolsList,
            Kind::Prompt => Step::PromptsList,
            Kind::Resource => Step::ResourcesList,
            Kind::ResourceTemplate => Step::ResourceTemplatesList,
        }
    }
    fn result_key(self) -> &'static str {
        match self {
            Kind::Tool => "tools",
            Kind::Prompt => "prompts",
            Kind::Resource => "resources",
            Kind::ResourceTemplate => "resourceTemplates",
        }
    }
}

/// Why a baseline file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("not a valid mcpulse baseline: {0}")]
    Invalid(serde_json::Error),
    /// Another version's baseline: written by a newer or older mcpulse.
    #[error("baseline schema is {0:?}; this mcpulse reads {SCHEMA:?}")]
    Schema(String),
}

impl Contract {
    pub fn items(&self, kind: Kind) -> &[Item] {
        match kind {
            Kind::Tool => &self.tools,
            Kind::Prompt => &self.prompts,
            Kind::Resource => &self.resources,
            Kind::ResourceTemplate => &self.resource_templates,
        }
    }

    /// The contract's outline: every item's key and digest, without its definition (`null`),
    /// and the server facts whole. Its digests are the contract's. What the monitor keeps of a
    /// contract too large to store whole: enough to tell which items were added, removed or
    /// changed, not how they changed.
    pub fn outline(&self) -> Contract {
        let bare = |items: &[Item]| -> Vec<Item> {
            items
                .iter()
                .map(|i| Item {
                    key: i.key.clone(),
                    digest: i.digest.clone(),
                    definition: Value::Null,
                })
                .collect()
        };
        Contract {
            schema: self.schema.clone(),
            target: self.target.clone(),
            digest: self.digest.clone(),
            server: self.server.clone(),
            tools: bare(&self.tools),
            prompts: bare(&self.prompts),
            resources: bare(&self.resources),
            resource_templates: bare(&self.resource_templates),
        }
    }

    /// Whether this is an [`outline`](Contract::outline): items, none with a definition.
    pub fn is_outline(&self) -> bool {
        let mut items = Kind::ALL.iter().flat_map(|k| self.items(*k));
        let first = items.next();
        first.is_some_and(|i| i.definition.is_null()) && items.all(|i| i.definition.is_null())
    }

    /// The baseline file text: pretty, sorted, stable, ending in a newline.
    pub fn to_lock(&self) -> String {
        let v = serde_json::to_value(self).unwrap_or(Value::Null);
        let mut s = serde_json::to_string_pretty(&canonical(&v)).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Reads a baseline file, with a message that says what is wrong.
    pub fn from_lock(text: &str) -> Result<Contract, LockError> {
        let c: Contract = serde_json::from_str(text).map_err(LockError::Invalid)?;
        if c.schema != SCHEMA {
            return Err(LockError::Schema(c.schema));
        }
        Ok(c)
    }

    /// Hides `secrets` in every string the contract holds (server facts, item keys and
    /// definitions: a server may echo what it was given into a tool's description), and, when
    /// that changed anything, computes its digests again from what it now says: the contract
    /// kept, shown, diffed and written to a baseline is the hidden one, and a rotated secret is
    /// no drift. Whether anything changed.
    pub fn hide(&mut self, secrets: &mcpulse_wire::redact::Secrets) -> bool {
        if secrets.is_empty() {
            return false;
        }
        let mut changed = false;
        let f = &mut self.server;
        for s in f
            .era
            .iter_mut()
            .chain(f.protocol_version.iter_mut())
            .chain(f.instructions.iter_mut())
            .chain(f.supported_versions.iter_mut())
        {
            changed |= secrets.hide_str(s);
        }
        changed |= secrets.hide_value(&mut f.capabilities);
        changed |= secrets.hide_value(&mut f.server_info);
        for item in self
            .tools
            .iter_mut()
            .chain(self.prompts.iter_mut())
            .chain(self.resources.iter_mut())
            .chain(self.resource_templates.iter_mut())
        {
            changed |= secrets.hide_str(&mut item.key);
            changed |= secrets.hide_value(&mut item.definition);
        }
        if changed {
            *self = self.resealed().0;
        }
        changed
    }

    /// The contract with every digest computed again from its content, and each stored digest
    /// (or key) that did not match it.
    ///
    /// A baseline is a file in a repository, edited by people and by tools: what it claims about
    /// itself is never trusted. Each item's key is read again from its definition and its
    /// digest computed from it, the server facts' digest from the facts, and the whole digest
    /// from those; items are sorted again as [`build`] sorts them. Definitions are not
    /// canonicalised or `$ref`-resolved a second time (resolving an already resolved recursive
    /// schema would expand it one level further): the digest is of the content as it stands.
    pub fn resealed(&self) -> (Contract, Vec<Mismatch>) {
        let mut mismatches = Vec::new();
        let mut c = self.clone();
        let mut facts = c.server.clone();
        facts.digest = String::new();
        let server_digest = digest(&serde_json::to_value(&facts).unwrap_or(Value::Null));
        if server_digest != c.server.digest {
            mismatches.push(Mismatch {
                what: "the server facts".to_owned(),
                stored: std::mem::take(&mut c.server.digest),
                computed: server_digest.clone(),
            });
        }
        c.server.digest = server_digest;
        for kind in Kind::ALL {
            let items = match kind {
                Kind::Tool => &mut c.tools,
                Kind::Prompt => &mut c.prompts,
                Kind::Resource => &mut c.resources,
                Kind::ResourceTemplate => &mut c.resource_templates,
            };
            for item in items.iter_mut() {
                let key = item
                    .definition
                    .get(kind.key_field())
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                if key != item.key {
                    mismatches.push(Mismatch {
                        what: format!("the key of {} {:?}", kind.noun(), item.key),
                        stored: std::mem::take(&mut item.key),
                        computed: key.clone(),
                    });
                    item.key = key;
                }
                let computed = digest(&item.definition);
                if computed != item.digest {
                    mismatches.push(Mismatch {
                        what: format!("{} {:?}", kind.noun(), item.key),
                        stored: std::mem::take(&mut item.digest),
                        computed: computed.clone(),
                    });
                }
                item.digest = computed;
            }
            items.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.digest.cmp(&b.digest)));
        }
        let whole = whole_digest(&c);
        // An item's mismatch changes the whole digest too: name the whole one only when it is
        // the only thing that was edited.
        if whole != c.digest && mismatches.is_empty() {
            mismatches.push(Mismatch {
                what: "the whole contract".to_owned(),
                stored: std::mem::take(&mut c.digest),
                computed: whole.clone(),
            });
        }
        c.digest = whole;
        (c, mismatches)
    }
}

/// A digest (or key) a baseline file stores that its own content does not give.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    /// What the digest is of: `tool "search"`, `the server facts`, `the whole contract`.
    pub what: String,
    pub stored: String,
    pub computed: String,
}

/// The contract of the server in a transcript; `None` when no handshake completed or the
/// tools could not be listed (a contract with a hole in it would read as drift).
pub fn from_transcript(tr: &Transcript) -> Option<Contract> {
    from_replies(&Replies::new(tr))
}

/// [`from_transcript`], reading the replies of a judgement's view.
pub(crate) fn from_replies(replies: &Replies<'_>) -> Option<Contract> {
    let tr = replies.transcript();
    let (era, decoded) = tr.exchanges.iter().find_map(|ex| {
        if !matches!(ex.step, Step::Discover | Step::Initialize) {
            return None;
        }
        let d = replies.of(ex)?;
        match (&d.message, ex.step) {
            (Message::Result { result, .. }, Step::Discover)
                if result.get("supportedVersions").is_some_and(Value::is_array) =>
            {
                Some(("modern", d))
            }
            (Message::Result { .. }, Step::Initialize) => Some(("legacy", d)),
            _ => None,
        }
    })?;
    let Message::Result { result, .. } = &decoded.message else {
        return None;
    };
    let supported: Vec<String> = match era {
        "modern" => strings(result.get("supportedVersions")),
        _ => result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .map(|v| vec![v.to_owned()])
            .unwrap_or_default(),
    };
    let protocol_version = match era {
        "modern" => supported
            .iter()
            .find(|v| v.as_str() == mcpulse_wire::version::MODERN)
            .cloned(),
        _ => result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    let server_info = match era {
        "modern" => result
            .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
            .cloned(),
        _ => result.get("serverInfo").cloned(),
    }
    .unwrap_or(Value::Null);
    // A contract with a hole in it would read as drift: an advertised list that failed, was
    // never sent, or was cut short (a `nextCursor` on its last page) means no contract. A list
    // the server does not advertise is empty, whether or not asking for it failed.
    let caps = result.get("capabilities");
    let advertised = |kind: Kind| {
        let key = match kind {
            Kind::Tool => "tools",
            Kind::Prompt => "prompts",
            Kind::Resource | Kind::ResourceTemplate => "resources",
        };
        caps.and_then(|c| c.get(key)).is_some_and(|v| !v.is_null())
    };
    // Items are borrowed from the decoded replies, not copied: the canonical copy is the
    // contract's own.
    let mut lists: Vec<Vec<&Value>> = Vec::new();
    for kind in Kind::ALL {
        // A list cut to its first items (`list-truncated`) is a contract with a hole.
        if replies.list_items(kind.step()).1 > 0 {
            return None;
        }
        let pages: Vec<_> = tr
            .exchanges
            .iter()
            .filter(|e| e.step == kind.step())
            .collect();
        let mut items = Vec::new();
        for (i, ex) in pages.iter().enumerate() {
            match replies.cached(ex).map(|d| &d.message) {
                Some(Message::Result { result, .. }) => {
                    if let Some(Value::Array(a)) = result.get(kind.result_key()) {
                        items.extend(a.iter());
                    }
                    let last = i + 1 == pages.len();
                    if last
                        && result.get("nextCursor").is_some_and(Value::is_string)
                        && advertised(kind)
                    {
                        return None;
                    }
                }
                _ if advertised(kind) => return None,
                _ => items.clear(),
            }
        }
        if pages.is_empty() && advertised(kind) {
            return None;
        }
        lists.push(items);
    }
    let [tools, prompts, resources, resource_templates]: [Vec<&Value>; 4] =
        lists.try_into().ok()?;
    Some(assemble(
        Parts {
            target: tr.target.display.clone(),
            era: Some(era.to_owned()),
            protocol_version,
            supported_versions: supported,
            capabilities: result.get("capabilities").cloned().unwrap_or(Value::Null),
            instructions: result
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
            server_info,
            ..Parts::default()
        },
        [&tools, &prompts, &resources, &resource_templates],
    ))
}

/// The raw material of a contract, as a server sent it.
#[derive(Debug, Clone, Default)]
pub struct Parts {
    pub target: String,
    pub era: Option<String>,
    pub protocol_version: Option<String>,
    pub supported_versions: Vec<String>,
    pub capabilities: Value,
    pub instructions: Option<String>,
    pub server_info: Value,
    pub tools: Vec<Value>,
    pub prompts: Vec<Value>,
    pub resources: Vec<Value>,
    pub resource_templates: Vec<Value>,
}

/// Builds the canonical contract, with its digests, from its parts.
pub fn build(mut p: Parts) -> Contract {
    let lists = [
        std::mem::take(&mut p.tools),
        std::mem::take(&mut p.prompts),
        std::mem::take(&mut p.resources),
        std::mem::take(&mut p.resource_templates),
    ];
    let [tools, prompts, resources, resource_templates] =
        lists.each_ref().map(|l| l.iter().collect::<Vec<&Value>>());
    assemble(p, [&tools, &prompts, &resources, &resource_templates])
}

/// [`build`], with the items of the four lists (tools, prompts, resources, templates) borrowed
/// instead of taken from `p`.
fn assemble(p: Parts, [tools, prompts, resources, resource_templates]: [&[&Value]; 4]) -> Contract {
    let mut supported = p.supported_versions;
    supported.sort();
    supported.dedup();
    let mut server = ServerFacts {
        era: p.era,
        protocol_version: p.protocol_version,
        supported_versions: supported,
        capabilities: canonical(&p.capabilities),
        instructions: p.instructions,
        server_info: canonical(&p.server_info),
        digest: String::new(),
    };
    server.digest = digest(&serde_json::to_value(&server).unwrap_or(Value::Null));
    let mut c = Contract {
        schema: SCHEMA.to_owned(),
        target: p.target,
        digest: String::new(),
        server,
        tools: items_of(Kind::Tool, tools),
        prompts: items_of(Kind::Prompt, prompts),
        resources: items_of(Kind::Resource, resources),
        resource_templates: items_of(Kind::ResourceTemplate, resource_templates),
    };
    c.digest = whole_digest(&c);
    c
}

/// The digest of a contract: of its server facts and item digests, in order.
pub fn whole_digest(c: &Contract) -> String {
    let mut v = Map::new();
    v.insert("server".into(), Value::String(c.server.digest.clone()));
    for kind in Kind::ALL {
        let list: Vec<Value> = c
            .items(kind)
            .iter()
            .map(|i| {
                Value::Array(vec![
                    Value::String(i.key.clone()),
                    Value::String(i.digest.clone()),
                ])
            })
            .collect();
        v.insert(kind.section().into(), Value::Array(list));
    }
    digest(&Value::Object(v))
}

fn items_of(kind: Kind, raw: &[&Value]) -> Vec<Item> {
    // Canonical, keyed and ordered first (by key, then by the digest of what the server sent):
    // the contract-wide `$ref` budget is then spent in an order the server's listing order does
    // not change, so that a contract past the budget has one digest however it is listed.
    let mut defs: Vec<(String, String, Value)> = raw
        .iter()
        .map(|v| {
            let def = canonical(v);
            let key = def
                .get(kind.key_field())
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            (key, digest(&def), def)
        })
        .collect();
    defs.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    // What `$ref` expansions may add to this contract (only tools resolve refs).
    let mut expansions = EXPANSION_BUDGET;
    let mut items: Vec<Item> = defs
        .into_iter()
        .map(|(key, raw_digest, mut def)| {
            let mut resolved = false;
            if kind == Kind::Tool
                && let Some(obj) = def.as_object_mut()
            {
                for k in ["inputSchema", "outputSchema"] {
                    if let Some(schema) = obj.get_mut(k) {
                        if has_ref(schema) {
                            *schema = resolve_refs_within(schema, &mut expansions);
                            resolved = true;
                        } else if let Some(o) = schema.as_object_mut() {
                            // What `resolve_refs` does to a schema without refs, without
                            // copying it.
                            resolved |= o.remove("$defs").is_some();
                            resolved |= o.remove("definitions").is_some();
                        }
                    }
                }
            }
            Item {
                key,
                digest: if resolved { digest(&def) } else { raw_digest },
                definition: def,
            }
        })
        .collect();
    items.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.digest.cmp(&b.digest)));
    items
}

/// Canonical JSON: object keys sorted (serde_json's map is ordered), numbers with an integral
/// value written as integers, everything else as is.
pub fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), canonical(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        Value::Number(n) => Value::Number(canonical_number(n)),
        other => other.clone(),
    }
}

fn canonical_number(n: &Number) -> Number {
    if n.is_i64() || n.is_u64() {
        return n.clone();
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 => Number::from(f as i64),
        Some(f) => Number::from_f64(f).unwrap_or_else(|| n.clone()),
        None => n.clone(),
    }
}

/// Whether [`canonical`] would leave `v` as it is: no number with an integral value written as
/// a float. (Keys need no check: serde_json's map keeps them sorted.)
fn is_canonical(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.values().all(is_canonical),
        Value::Array(a) => a.iter().all(is_canonical),
        Value::Number(n) => canonical_number(n) == *n,
        _ => true,
    }
}

/// `sha256:<hex>` of the canonical JSON text.
pub fn digest(v: &Value) -> String {
    // Most values are canonical already (a contract's are by construction): copy only the
    // others.
    let text = if is_canonical(v) {
        serde_json::to_string(v)
    } else {
        serde_json::to_string(&canonical(v))
    }
    .unwrap_or_default();
    let hash = Sha256::digest(text.as_bytes());
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    for b in hash {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    s
}

/// Whether a schema holds a `$ref` that [`resolve_refs`] would try to resolve.
fn has_ref(v: &Value) -> bool {
    match v {
        Value::Object(m) => {
            matches!(m.get("$ref"), Some(Value::String(_))) || m.values().any(has_ref)
        }
        Value::Array(a) => a.iter().any(has_ref),
        _ => false,
    }
}

/// Resolves local `$ref`s (`#/...` JSON pointers) within one schema, so that moving a
/// definition into `$defs` is not drift while changing it is. Cycles and unresolvable refs are
/// left as they are; `$defs`/`definitions` are dropped once every ref resolved. Within the
/// bounds of [`resolve_refs_within`], with a budget of its own.
pub fn resolve_refs(schema: &Value) -> Value {
    let mut left = EXPANSION_BUDGET;
    resolve_refs_within(schema, &mut left)
}

/// [`resolve_refs`], its expansions charged to `left` (estimated heap bytes, shared by every
/// schema of one contract). A ref is left as it is when expanding it would overdraw `left`,
/// nest the schema deeper than [`MAX_RESOLVED_DEPTH`], or pass [`MAX_EXPANSIONS`]: each
/// expansion is a copy of its target, so a schema of a few hundred kilobytes (1,000 refs to
/// one definition of 100,000 values) would otherwise resolve to gigabytes, and a chain of
/// definitions to a value nested too deep to be read back from a baseline.
pub fn resolve_refs_within(schema: &Value, left: &mut usize) -> Value {
    let mut r = Resolver {
        root: schema,
        active: Vec::new(),
        budget: MAX_EXPANSIONS,
        unresolved: false,
        left,
        sizes: std::collections::HashMap::new(),
    };
    let mut out = r.resolve(schema, 0);
    if !r.unresolved
        && let Some(obj) = out.as_object_mut()
    {
        obj.remove("$defs");
        obj.remove("definitions");
    }
    out
}

/// The most `$ref` expansions per schema: a schema built to explode (every definition
/// referring twice to the next) costs this much and no more.
const MAX_EXPANSIONS: usize = 1000;

/// What `$ref` expansions may add to one contract, in estimated heap bytes
/// ([`mcpulse_wire::json::Cost`]): 8 MiB (docs/probe.md, "Memory").
pub const EXPANSION_BUDGET: usize = 8 << 20;

/// The deepest a resolved schema may nest (levels below the schema itself): a baseline nests
/// a schema 3 levels down, and is read back with serde_json's limit of 128.
pub const MAX_RESOLVED_DEPTH: usize = 100;

struct Resolver<'a, 'b> {
    root: &'a Value,
    /// The refs being expanded: a ref met again inside itself is a cycle and stays a `$ref`.
    active: Vec<String>,
    budget: usize,
    unresolved: bool,
    left: &'b mut usize,
    /// Each target's estimated cost and depth, measured once.
    sizes: std::collections::HashMap<String, (usize, usize)>,
}

/// A value's estimated heap cost ([`mcpulse_wire::json::Cost`], its own slot included) and
/// depth (1 for a scalar).
fn cost_and_depth(v: &Value) -> (usize, usize) {
    use mcpulse_wire::json::Cost;
    const SLOT: usize = Cost::SLOT;
    match v {
        Value::String(s) => (SLOT + Cost::string(s.len()), 1),
        Value::Array(a) => a
            .iter()
            .fold((SLOT + Cost::array(a.len()), 1), |(c, d), x| {
                let (xc, xd) = cost_and_depth(x);
                (c.saturating_add(xc), d.max(xd + 1))
            }),
        Value::Object(m) => m
            .iter()
            .fold((SLOT + Cost::object(m.len()), 1), |(c, d), (k, x)| {
                let (xc, xd) = cost_and_depth(x);
                (
                    c.saturating_add(Cost::string(k.len())).saturating_add(xc),
                    d.max(xd + 1),
                )
            }),
        _ => (SLOT, 1),
    }
}

impl Resolver<'_, '_> {
    /// `v`, found `depth` levels below the schema, resolved.
    fn resolve(&mut self, v: &Value, depth: usize) -> Value {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    match r.strip_prefix('#').and_then(|p| self.root.pointer(p)) {
                        Some(target) if !self.active.contains(r) && self.budget > 0 => {
                            let (cost, levels) = *self
                                .sizes
                                .entry(r.clone())
                                .or_insert_with(|| cost_and_depth(target));
                            if cost <= *self.left && depth + levels <= MAX_RESOLVED_DEPTH {
                                *self.left -= cost;
                                self.budget -= 1;
                                self.active.push(r.clone());
                                let mut resolved = self.resolve(target, depth);
                                // Siblings of $ref (2020-12 allows them) override the target.
                                if let Some(obj) = resolved.as_object_mut() {
                                    for (k, sv) in m {
                                        if k != "$ref" {
                                            let x = self.resolve(sv, depth + 1);
                                            obj.insert(k.clone(), x);
                                        }
                                    }
                                }
                                self.active.pop();
                                return resolved;
                            }
                            // over the contract's budget or too deep: left as it is
                            self.unresolved = true;
                        }
                        // a cycle, the budget spent, a remote or dangling ref: left as it is
                        _ => self.unresolved = true,
                    }
                }
                Value::Object(
                    m.iter()
                        .map(|(k, v)| (k.clone(), self.resolve(v, depth + 1)))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| self.resolve(x, depth + 1)).collect()),
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_have_one_spelling() {
        let a: Value = serde_json::from_str(r#"{"b":1.0,"a":[2e0,3.5]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":[2,3.5],"b":1}"#).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_eq!(
            serde_json::to_string(&canonical(&a)).unwrap(),
            r#"{"a":[2,3.5],"b":1}"#
        );
    }

    #[test]
    fn local_refs_resolve() {
        let with_ref = json!({
            "type": "object",
            "properties": {"q": {"$ref": "#/$defs/Q"}},
            "$defs": {"Q": {"type": "string", "minLength": 1}}
        });
        let inline =
            json!({"type": "object", "properties": {"q": {"type": "string", "minLength": 1}}});
        assert_eq!(resolve_refs(&with_ref), inline);
        let cyclic = json!({"$defs": {"N": {"properties": {"next": {"$ref": "#/$defs/N"}}}}, "properties": {"n": {"$ref": "#/$defs/N"}}});
        let r = resolve_refs(&cyclic); // the cycle stays a $ref one level down
        assert_eq!(
            r["properties"]["n"]["properties"]["next"]["$ref"],
            "#/$defs/N"
        );
        let mut bomb = serde_json::Map::new();
        for i in 0..40 {
            bomb.insert(format!("D{i}"), json!({"a": {"$ref": format!("#/$defs/D{}", i + 1)}, "b": {"$ref": format!("#/$defs/D{}", i + 1)}}));
        }
        let bomb = json!({"$defs": bomb, "properties": {"x": {"$ref": "#/$defs/D0"}}});
        let _ = resolve_refs(&bomb); // bounded by MAX_EXPANSIONS, not 2^40
        let remote = json!({"properties": {"x": {"$ref": "https://example.com/s.json"}}});
        assert_eq!(resolve_refs(&remote), remote);
    }

    /// 1,000 refs to one definition of 100,000 values (a schema of about 600 KB): each
    /// expansion a copy, 10^8 values unbounded. The expansions stop at the budget; the refs
    /// past it stay refs (and `$defs` stays, for them).
    #[test]
    fn expansions_stop_at_their_budget() {
        let big: Vec<u32> = (0..100_000).collect();
        let mut props = serde_json::Map::new();
        for i in 0..1000 {
            props.insert(format!("p{i}"), json!({"$ref": "#/$defs/D"}));
        }
        let schema = json!({"type": "object", "properties": props, "$defs": {"D": {"enum": big}}});
        let (input, _) = cost_and_depth(&schema);
        let mut left = EXPANSION_BUDGET;
        let out = resolve_refs_within(&schema, &mut left);
        let (output, _) = cost_and_depth(&out);
        assert!(
            output <= input + EXPANSION_BUDGET,
            "{output} > {input} + {EXPANSION_BUDGET}"
        );
        let expanded = out["properties"]
            .as_object()
            .unwrap()
            .values()
            .filter(|p| p.get("enum").is_some())
            .count();
        assert!((1..1000).contains(&expanded), "{expanded} expanded");
        assert_eq!(out["properties"]["p999"]["$ref"], "#/$defs/D");
        assert!(out.get("$defs").is_some());
        // The budget is the contract's: a second schema finds it spent.
        let again = resolve_refs_within(&schema, &mut left);
        assert_eq!(again["properties"]["p0"]["$ref"], "#/$defs/D");
    }

    /// Two tools whose refs together need more than the contract's budget: which of them is
    /// resolved does not depend on the order the server listed them in (a server listing in
    /// hash order would drift on every probe).
    #[test]
    fn the_budget_is_spent_in_a_stable_order() {
        let big: Vec<u32> = (0..20_000).collect();
        let tool = |name: &str| {
            let props: serde_json::Map<String, Value> = (0..4)
                .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/D"})))
                .collect();
            json!({"name": name, "inputSchema": {"type": "object", "properties": props, "$defs": {"D": {"enum": big}}}})
        };
        let (a, b) = (tool("alpha"), tool("beta"));
        let one = build(Parts {
            tools: vec![a.clone(), b.clone()],
            ..Parts::default()
        });
        let other = build(Parts {
            tools: vec![b, a],
            ..Parts::default()
        });
        assert_eq!(one.digest, other.digest);
        // And the budget did bind: the second tool kept a ref.
        assert!(one.tools[1].definition.to_string().contains("$ref"));
        assert!(!one.tools[0].definition.to_string().contains("$ref"));
    }

    /// A chain of 70 definitions, each nesting the next two levels down: resolved whole, 140
    /// levels, which a baseline could not be read back with. Expansion stops at the depth
    /// bound, and the contract goes through its lock file and back.
    #[test]
    fn expansions_stop_at_a_depth_a_baseline_can_hold() {
        let mut defs = serde_json::Map::new();
        for i in 0..70 {
            defs.insert(
                format!("D{i}"),
                json!({"type": "object", "properties": {"x": {"$ref": format!("#/$defs/D{}", i + 1)}}}),
            );
        }
        defs.insert("D70".into(), json!({"type": "string"}));
        let schema =
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/D0"}}, "$defs": defs});
        let out = resolve_refs(&schema);
        let (_, depth) = cost_and_depth(&out);
        assert!(depth <= MAX_RESOLVED_DEPTH + 1, "{depth} levels");
        let contract = build(Parts {
            tools: vec![json!({"name": "deep", "inputSchema": schema})],
            ..Parts::default()
        });
        let back = Contract::from_lock(&contract.to_lock()).unwrap();
        assert_eq!(back, contract);
    }
}
