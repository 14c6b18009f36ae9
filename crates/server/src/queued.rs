//! What the notifier, the outpoint watch and the silent-payment hubs hand
//! a session: a session's id, and a notification line waiting for the
//! session to write it. Its own module so that those three can share it
//! without importing one another.

use osprey_core::{ByteBudget, Charge};
use std::sync::Arc;

pub(crate) type SessionId = u64;

/// A notification line waiting for its session to write it, charged to
/// the client memory budget until then.
#[derive(Debug)]
pub(crate) struct Queued {
    pub line: Arc<str>,
    /// A silent-payments notification's subscription, by the generation
    /// its session gave it (`silent::SpGenerations`): written only while
    /// that subscription is still the client's.
    pub sp_generation: Option<u64>,
    /// Transactions a silent-payments notification reports: counted
    /// (`osprey_sp_matches_total`) when the session writes it, not when it
    /// is queued, since a replaced subscription's lines are dropped.
    pub sp_matches: u64,
    _charge: Charge,
}

impl Queued {
    /// `line`, charged to `budget`; `None` if the budget cannot hold it.
    pub fn charged(line: Arc<str>, budget: &Arc<ByteBudget>) -> Option<Queued> {
        let mut charge = Charge::new(budget);
        charge.resize(line.len()).then_some(Queued {
            line,
            sp_generation: None,
            sp_matches: 0,
            _charge: charge,
        })
    }

    /// This line, as a notification of the silent-payments subscription
    /// of `generation` reporting `matches` transactions.
    pub fn of_sp_subscription(self, generation: u64, matches: usize) -> Queued {
        Queued {
            sp_generation: Some(generation),
            sp_matches: matches as u64,
            ..self
        }
    }
}
