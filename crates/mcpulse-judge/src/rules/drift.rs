//! The drift rules: every kind of change between two contracts, with its code, its class
//! (breaking, risky, info) and what it means. It does not own the diff that finds the changes
//! (`crate::drift`).

use serde::{Deserialize, Serialize};

/// How bad a change is. Ordered: `Info < Risky < Breaking`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Info,
    Risky,
    Breaking,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Info => "info",
            Class::Risky => "risky",
            Class::Breaking => "breaking",
        }
    }
    /// The CI-gate exit code: 2 breaking, 1 risky, 0 info.
    pub fn exit_code(self) -> u8 {
        match self {
            Class::Breaking => 2,
            Class::Risky => 1,
            Class::Info => 0,
        }
    }
}

crate::rule_family! {
    /// A drift rule: one kind of change between two contracts. The variant order is the order of
    /// `docs/drift.md`.
    DriftRule, Class;
    ItemRemoved = "item-removed", Breaking,
        "A tool, prompt, resource or resource template was removed.",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    RequiredParameterAdded = "required-parameter-added", Breaking,
        "A tool parameter (or prompt argument) became required: old calls lack it.",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    ParameterRemoved = "parameter-removed", Breaking,
        "A tool parameter (or prompt argument) was removed: old calls send it.",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    ParameterRenamed = "parameter-renamed", Breaking,
        "A parameter was removed and another with the same schema added: a rename.",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    TypeNarrowed = "type-narrowed", Breaking,
        "A parameter's type changed or accepts fewer types, or `anyOf`/`oneOf` alternatives were removed (or such a list added).",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    EnumNarrowed = "enum-narrowed", Breaking,
        "Values were removed from an `enum`.",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    AdditionalPropertiesClosed = "additional-properties-closed", Breaking,
        "`additionalProperties` became `false`.",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    ConstraintTightened = "constraint-tightened", Breaking,
        "A bound (minimum, exclusiveMinimum, maximum, exclusiveMaximum, minLength, maxLength, minItems, maxItems, minProperties, maxProperties) tightened, or a `pattern`/`format`/`const` was added or changed.",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    OutputSchemaChanged = "output-schema-changed", Breaking,
        "The output schema changed incompatibly: removed, a property removed or no longer required, a type changed.",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    CapabilityRemoved = "capability-removed", Breaking,
        "The server no longer advertises a capability.",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    ProtocolVersionDropped = "protocol-version-dropped", Breaking,
        "A protocol version the server supported is no longer supported.",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    EraChanged = "era-changed", Breaking,
        "The server crossed protocol eras (stateful legacy ↔ stateless modern).",
        "A client built against the old contract fails against the new one: old calls are rejected or old results no longer hold.";
    DescriptionChanged = "description-changed", Risky,
        "A description changed: what the model reads changed (possible tool poisoning, a \"rug pull\").",
        "The contract still works, but what the model reads or what a tool may do changed: review it before trusting the server again.";
    TitleChanged = "title-changed", Risky,
        "A title changed.",
        "The contract still works, but what the model reads or what a tool may do changed: review it before trusting the server again.";
    AnnotationRiskWidened = "annotation-risk-widened", Risky,
        "An annotation flip widened risk: `readOnlyHint` true→false, `destructiveHint` false→true, `openWorldHint` false→true (with the spec's defaults).",
        "The contract still works, but what the model reads or what a tool may do changed: review it before trusting the server again.";
    HiddenUnicodeIntroduced = "hidden-unicode-introduced", Risky,
        "Invisible, bidirectional-control or tag Unicode characters appeared in a name, title or description.",
        "The contract still works, but what the model reads or what a tool may do changed: review it before trusting the server again.";
    ItemDuplicated = "item-duplicated", Risky,
        "A second tool, prompt, resource or resource template under a name (or URI) the contract already lists: a client may call either, and one may shadow the other.",
        "The contract still works, but what the model reads or what a tool may do changed: review it before trusting the server again.";
    InstructionsChanged = "instructions-changed", Risky,
        "The server's `instructions` (read by the model) changed.",
        "The contract still works, but what the model reads or what a tool may do changed: review it before trusting the server again.";
    ItemAdded = "item-added", Info,
        "A tool, prompt, resource or resource template was added.",
        "Compatible: reported so that nothing changes silently.";
    OptionalParameterAdded = "optional-parameter-added", Info,
        "An optional parameter was added.",
        "Compatible: reported so that nothing changes silently.";
    Widened = "widened", Info,
        "A change that accepts more: a type or enum widened, a bound loosened, a parameter no longer required, `additionalProperties` opened, `anyOf`/`oneOf` alternatives added (or such a list removed).",
        "Compatible: reported so that nothing changes silently.";
    AnnotationChanged = "annotation-changed", Info,
        "An annotation changed without widening risk.",
        "Compatible: reported so that nothing changes silently.";
    CapabilityAdded = "capability-added", Info,
        "The server advertises a new capability.",
        "Compatible: reported so that nothing changes silently.";
    ProtocolVersionAdded = "protocol-version-added", Info,
        "The server supports a new protocol version.",
        "Compatible: reported so that nothing changes silently.";
    ServerInfoChanged = "server-info-changed", Info,
        "The self-reported `serverInfo` (name, version) changed.",
        "Compatible: reported so that nothing changes silently.";
    OtherChanged = "other-changed", Info,
        "Any other change to an item or the server facts (icons, `_meta`, capability details, unknown keys).",
        "Compatible: reported so that nothing changes silently.";
}

impl DriftRule {
    /// The class every change of this rule has.
    pub fn class(self) -> Class {
        self.weight()
    }
}
