//! The feed of chain and mempool changes the notifier consumes: a
//! `tokio::sync::broadcast` of `Arc<Change>` published by the query layer
//! whenever a block is connected or disconnected or the mempool changes.
//! Traits, so tests can publish changes without a database.

use osprey_core::{Height, ScriptHash};
use std::sync::Arc;
use tokio::sync::broadcast;

/// What one change says.
pub trait ChangeView: Send + Sync + 'static {
    /// The new tip, if it moved.
    fn new_tip(&self) -> Option<(Height, [u8; 80])>;
    /// The full script hashes the change touched.
    fn scripthashes(&self) -> &[ScriptHash];
    /// True when any script's status may have changed (blocks were undone).
    fn all_scripthashes(&self) -> bool {
        false
    }
}

/// A source of changes (implemented by `osprey_query::Query`).
pub trait ChangeSource: Send + Sync + 'static {
    type Change: ChangeView;
    /// Subscribes to the changes published from now on.
    fn changes(&self) -> broadcast::Receiver<Arc<Self::Change>>;
}

/// A plain change, for tests and for sources other than `Query`.
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub new_tip: Option<(Height, [u8; 80])>,
    pub scripthashes: Vec<ScriptHash>,
    pub all_scripthashes: bool,
}

impl ChangeView for Change {
    fn new_tip(&self) -> Option<(Height, [u8; 80])> {
        self.new_tip
    }

    fn scripthashes(&self) -> &[ScriptHash] {
        &self.scripthashes
    }

    fn all_scripthashes(&self) -> bool {
        self.all_scripthashes
    }
}

mod query_impl {
    use super::*;

    impl ChangeView for osprey_query::Change {
        fn new_tip(&self) -> Option<(Height, [u8; 80])> {
            self.new_tip
        }

        fn scripthashes(&self) -> &[ScriptHash] {
            &self.scripthashes
        }

        fn all_scripthashes(&self) -> bool {
            self.all_scripthashes
        }
    }

    impl ChangeSource for osprey_query::Query {
        type Change = osprey_query::Change;

        fn changes(&self) -> broadcast::Receiver<Arc<osprey_query::Change>> {
            osprey_query::Query::changes(self)
        }
    }
}
