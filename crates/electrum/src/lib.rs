//! The Electrum protocol, versions 1.4 to 1.7, without sockets: JSON-RPC 2.0
//! framing of a line, parameter parsing (by position and by name), the
//! method table, one module per method family, per-session protocol state,
//! and the mapping of errors to JSON-RPC error objects.
//!
//! Layout: `jsonrpc` (envelope) → `request` (the method table, typed
//! `Request`) → `dispatch` (runs a line for a `session`) → the families
//! `server`, `headers`, `scripthash`, `outpoint`, `transaction`, `mempool`,
//! `fee`, `silent_payments`, which
//! ask an `osprey_answers::Backend` (implemented by `osprey_query::Query`,
//! and by the in-memory fake for tests) and shape JSON. The answers' types
//! and the error are `osprey_answers`', so this crate builds without the
//! index's database.
//! Errors become JSON-RPC objects only in `error::RpcError::to_json`.
//! Sockets, tasks and notifications across sessions belong to
//! `osprey-server`.

pub mod dispatch;
pub mod error;
pub mod fee;
pub mod headers;
pub mod jsonrpc;
pub mod mempool;
pub mod outpoint;
pub mod params;
pub mod request;
pub mod script;
pub mod scripthash;
pub mod server;
pub mod session;
pub mod silent_payments;
pub mod transaction;
pub mod version;

#[cfg(any(test, feature = "fake"))]
pub mod fake;

pub use dispatch::{BatchThreads, DispatchConfig, Dispatcher, Effect, Outcome, ReplyEstimate};
pub use error::RpcError;
pub use request::{Request, METHODS};
pub use script::{ScriptForm, ScriptKey};
pub use server::{PeerFeatures, PeerInfo, Peers, PublicHost, ServerInfo};
pub use session::{SessionState, SubscriptionBudget};
pub use silent_payments::{SilentPaymentsConfig, SpSubscription};
pub use version::ProtocolVersion;

#[cfg(test)]
mod tests;
