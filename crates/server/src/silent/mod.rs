//! One session's silent-payment subscriptions and their scans
//! (docs/silent-payments.md, 1.3 and 3.6): the hub. A session gets one at
//! its first `blockchain.silentpayments.subscribe`; it owns the
//! subscriptions, their keys and one task, and goes with the session.
//!
//! Each subscription first scans its historical range in chunks of
//! [`CHUNK_RECORDS`] records, one chunk at a time per hub, each holding a
//! handler slot taken with `Scheduler::acquire_scan` (the greedy class,
//! queued by the session's scan cost, never charged to its request cost)
//! and run on a scan thread at the lowest CPU priority
//! (`scan_threads.rs`). Matches go out in pages
//! of [`PAGE_ENTRIES`]; a notification goes out at least every
//! [`HEARTBEAT`] even with nothing found, with the fraction of the range's
//! records scanned. The last one, progress 1.0, adds the mempool's
//! matches; it is sent again once, with no history, a little later, and no
//! notification goes out in the first moments of a subscription (Sparrow's
//! threading: [`FIRST_NOTIFICATION_DELAY`]). Then the subscription follows the chain: the blocks
//! of each change (from the fork after a reorg, found by the block hashes
//! it remembers), the mempool transactions it names, sent only when
//! something matched, and a mempool transaction never twice (nor again
//! when it confirms).
//!
//! Order: the hub writes into the session's queue, which the session reads
//! only after the subscribe's response is written, so the response comes
//! first. The notifier hands the hub every change before the lines of that
//! change, and the session's lines; the hub queues a line once its
//! following subscriptions have scanned the changes before it (rule 7).
//! Subscriptions still in their historical scan do not hold lines back:
//! they take up the chain where their range ends.
//!
//! Back-pressure: no chunk starts while the session's queue is full, and a
//! notification waits for room in it; a client that reads slowly slows
//! only its own scans. Every line is charged to the client memory budget
//! until written, as the notifier's are; the subscription itself was
//! charged at subscribe (`osprey_electrum::session::SP_SUBSCRIPTION_BYTES`).
//!
//! Keys: `ScanKeys` live in the subscription (shared only with the chunk
//! that scans with them); unsubscribing, subscribing again and the end of
//! the session drop them.

//!
//! Here: the constants, the inputs and the session's handle. Beside it:
//! `hub` (the state and loop, notifications), `historical` (the range's
//! scan and its end), `live` (following the chain), `scan` (running scan
//! work on a scan slot) and `blocks` (the recent blocks, for reorgs).

mod blocks;
mod historical;
mod hub;
mod live;
mod scan;
#[cfg(test)]
mod tests;

use crate::fair::Scheduler;
use crate::queued::Queued;
use hub::Hub;
use osprey_answers::{Backend, Change};
use osprey_core::ByteBudget;
use osprey_electrum::SpSubscription;
use osprey_metrics::Metrics;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

/// Records per chunk: about 65 ms of a core at the kernel's 63 µs.
const CHUNK_RECORDS: usize = 1000;
/// Entries per notification (Frigate's `HISTORY_PAGE_SIZE`).
const PAGE_ENTRIES: usize = 100;
/// A historical scan says how far it is at least this often (Frigate's
/// progress poll), so a client can tell a long scan from a dead one.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(5);
/// Blocks below the tip whose hashes a subscription keeps, to find where a
/// reorg forked. Deeper reorgs rescan from the oldest kept.
const REORG_DEPTH_MAX: u32 = 100;
/// A historical scan's progress stays below this until it ends: 1.0 tells
/// Sparrow the scan is complete.
const PROGRESS_BEFORE_END_MAX: f64 = 0.999;
/// No notification of a new subscription goes out sooner than this after
/// it: Sparrow learns the subscription's start height only once the
/// subscribe call has returned to its calling thread, while its reader
/// thread goes on reading, and it drops every notification it reads before
/// (sparrowwallet/sparrow `SubscriptionService.silentPaymentsUpdate`, the
/// `serverStart` check). A scan that ends at once (a short range, a
/// reconnect near the tip) would otherwise lose its pages and its one
/// progress 1.0, and Sparrow would wait for the scan forever.
const FIRST_NOTIFICATION_DELAY: Duration = Duration::from_millis(500);
/// The final notification (progress 1.0) goes out once more, with no
/// history, this long after it: should Sparrow's calling thread be held up
/// past [`FIRST_NOTIFICATION_DELAY`] and the first one dropped, the scan
/// still completes. Sparrow takes the repeat, once complete, as a progress
/// event only: with no history it changes nothing.
const FINAL_REPEAT_DELAY: Duration = Duration::from_secs(2);

/// What reaches a hub, in order: from its session (subscriptions) and from
/// the notifier (changes and the session's lines).
#[derive(Debug)]
pub(crate) enum HubInput {
    /// A subscription, with the generation its session gave it
    /// ([`SpGenerations::subscribed`]).
    Subscribe {
        subscription: SpSubscription,
        generation: u64,
    },
    Unsubscribe(String),
    /// The notifier has the hub: every change after this reaches it.
    Attached,
    Change(Arc<Change>),
    /// The change feed lagged: anything may have changed.
    Resync,
    /// A notification line of the session, queued after the changes
    /// before it are scanned.
    Line(Queued),
}

/// A session's silent-payments subscriptions as its client knows them: the
/// generation of each address's latest accepted subscribe. The session
/// writes a subscribe's response before the hub takes the subscription,
/// so lines the hub queued meanwhile for the address's earlier
/// subscription (a repeat of its end falling due, a page) would reach the
/// client after that response, where they read as the new scan's (issue
/// 35: a stale repeated end read as a new scan ending with nothing). The
/// hub tags each notification with its subscription's generation, and the
/// session writes only those of a current one. Holds one entry per
/// subscription of the session, which the session's limit bounds.
#[derive(Debug, Default)]
pub(crate) struct SpGenerations {
    current: HashMap<String, u64>,
    last: u64,
}

impl SpGenerations {
    /// A subscribe to `address` is accepted (before its response is
    /// written): returns its generation, for the hub.
    pub fn subscribed(&mut self, address: &str) -> u64 {
        self.last += 1;
        self.current.insert(address.to_owned(), self.last);
        self.last
    }

    /// An unsubscribe of `address` is accepted: none of its lines goes out
    /// after its response.
    pub fn unsubscribed(&mut self, address: &str) {
        self.current.remove(address);
    }

    /// Whether `queued` is to be written: any line but a notification of a
    /// subscription since replaced or dropped. A notification admitted
    /// counts its transactions in `matches` (`osprey_sp_matches_total`):
    /// the metric counts what clients are sent.
    pub fn admit(&self, queued: &Queued, matches: &osprey_metrics::IntCounter) -> bool {
        let admitted = queued
            .sp_generation
            .is_none_or(|generation| self.current.values().any(|&g| g == generation));
        if admitted {
            matches.inc_by(queued.sp_matches);
        }
        admitted
    }
}

/// What every hub shares.
pub(crate) struct HubContext {
    pub backend: Arc<dyn Backend>,
    pub scheduler: Arc<Scheduler>,
    pub client_memory: Arc<ByteBudget>,
    pub metrics: Arc<Metrics>,
}

/// A session's hold on its hub: dropping it ends the hub, its scans and
/// its keys.
pub(crate) struct SpHub {
    input: mpsc::Sender<HubInput>,
    task: JoinHandle<()>,
}

impl Drop for SpHub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SpHub {
    /// Starts a hub writing to a session's `queue`, `kick`ing the session
    /// when it cannot keep up; it takes at most `capacity` inputs ahead.
    pub fn start(
        ctx: Arc<HubContext>,
        queue: mpsc::Sender<Queued>,
        kick: Arc<Notify>,
        capacity: usize,
    ) -> SpHub {
        let (input, received) = mpsc::channel(capacity);
        let hub = Hub::new(ctx, queue, kick);
        SpHub {
            input,
            task: tokio::spawn(hub.run(received)),
        }
    }

    /// Where the notifier sends changes and lines.
    pub fn input(&self) -> mpsc::Sender<HubInput> {
        self.input.clone()
    }

    /// Hands the hub a subscription change; false if it cannot take more
    /// (its session is not keeping up) or is gone.
    pub fn send(&self, input: HubInput) -> bool {
        self.input.try_send(input).is_ok()
    }
}
