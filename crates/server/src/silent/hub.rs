//! The hub's state and loop: its subscriptions, the inputs it takes in
//! order, and the notifications it queues for its session.

use super::live::Mempool;
use super::{HubContext, HubInput, FIRST_NOTIFICATION_DELAY, PAGE_ENTRIES};
use crate::fair::SessionCost;
use crate::queued::Queued;
use bitcoin::{BlockHash, Txid};
use osprey_answers::{Error, SpChunk, SpCursor, SpMatch};
use osprey_core::Height;
use osprey_electrum::SpSubscription;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

/// One subscription's state.
pub(super) struct Sub {
    pub(super) subscription: SpSubscription,
    /// Given by the session ([`super::SpGenerations`]): tells a chunk or a
    /// line of this subscription from one of an earlier subscription to
    /// the same address.
    pub(super) generation: u64,
    pub(super) phase: Phase,
    /// Matches not sent yet.
    pub(super) page: Vec<SpMatch>,
    /// When the last notification went out: the next heartbeat is due
    /// `HEARTBEAT` later.
    pub(super) last_sent: Instant,
    /// No notification before this ([`FIRST_NOTIFICATION_DELAY`]).
    pub(super) quiet_until: Instant,
    /// When the final notification is sent again ([`FINAL_REPEAT_DELAY`]).
    pub(super) repeat_final_at: Option<Instant>,
    /// The progress last sent: it never goes back.
    pub(super) progress: f64,
    /// Hashes of recent blocks scanned (or being scanned), by height.
    pub(super) recent: BTreeMap<Height, BlockHash>,
    /// Mempool transactions sent: not sent again while in the mempool, nor
    /// when they confirm.
    pub(super) sent_mempool: HashSet<Txid>,
    /// After a failed chunk, no other before this.
    pub(super) retry_at: Option<Instant>,
}

pub(super) enum Phase {
    Historical {
        cursor: SpCursor,
        /// Bytes of records in the whole range, known from the first chunk.
        range_bytes: Option<u64>,
        done: bool,
    },
    /// Following the chain: blocks up to `scanned_to` are scanned.
    Live { scanned_to: Height },
}

/// The chunk in flight: its subscription, and the scan with how long it
/// held its slot.
pub(super) struct Running {
    pub(super) address: String,
    pub(super) generation: u64,
    pub(super) task: JoinHandle<(Result<SpChunk, Error>, Duration)>,
}

pub(super) struct Hub {
    pub(super) ctx: Arc<HubContext>,
    pub(super) queue: mpsc::Sender<Queued>,
    pub(super) kick: Arc<Notify>,
    pub(super) subs: BTreeMap<String, Sub>,
    /// Changes and lines from the notifier, in order, waiting for the
    /// running chunk (one chunk at a time) or for a change's scans.
    pub(super) backlog: VecDeque<HubInput>,
    pub(super) attached: bool,
    /// What the session's scans cost lately (apart from its requests).
    pub(super) scan_cost: SessionCost,
    pub(super) running: Option<Running>,
    /// The subscription whose historical chunk ran last (turns go round).
    pub(super) last_turn: Option<String>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        if let Some(running) = &self.running {
            running.task.abort();
        }
        self.ctx
            .metrics
            .silent_payments
            .subscriptions
            .sub(self.subs.len() as i64);
    }
}

/// Why the hub stops: its session is gone.
pub(super) struct Gone;

/// `1 - left / total`, or 0 for an empty range.
pub(super) fn fraction_done(left: u64, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    1.0 - left as f64 / total as f64
}

impl Hub {
    pub(super) fn new(ctx: Arc<HubContext>, queue: mpsc::Sender<Queued>, kick: Arc<Notify>) -> Hub {
        Hub {
            ctx,
            queue,
            kick,
            subs: BTreeMap::new(),
            backlog: VecDeque::new(),
            attached: false,
            scan_cost: SessionCost::new(),
            running: None,
            last_turn: None,
        }
    }

    pub(super) async fn run(mut self, mut input: mpsc::Receiver<HubInput>) {
        // Ends when the session is gone (its queue closed, or its handle
        // dropped: then this task is aborted).
        let _ = self.serve(&mut input).await;
    }

    pub(super) async fn serve(&mut self, input: &mut mpsc::Receiver<HubInput>) -> Result<(), Gone> {
        loop {
            if self.running.is_none() {
                while let Some(next) = self.backlog.pop_front() {
                    self.take(next).await?;
                }
                self.finish_scans().await?;
                self.start_chunk().await?;
            }
            let heartbeat = self.next_heartbeat();
            let retry = self.next_retry();
            tokio::select! {
                received = input.recv() => match received {
                    Some(received) => self.receive(received).await?,
                    None => return Err(Gone),
                },
                finished = async { (&mut self.running.as_mut().expect("guarded").task).await },
                    if self.running.is_some() =>
                {
                    let running = self.running.take().expect("guarded");
                    match finished {
                        Ok((result, held)) => self.chunk_done(running, result, held).await?,
                        Err(e) => tracing::error!(error = %e, "a silent-payments scan chunk failed"),
                    }
                }
                _ = sleep_until(heartbeat.unwrap_or_else(Instant::now)), if heartbeat.is_some() => {
                    self.heartbeats().await?;
                }
                _ = sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => {
                    let now = Instant::now();
                    for sub in self.subs.values_mut() {
                        sub.retry_at = sub.retry_at.filter(|at| *at > now);
                    }
                }
            }
        }
    }

    /// Takes an input as it arrives: subscriptions at once; a line at
    /// once unless changes wait before it; changes in turn.
    pub(super) async fn receive(&mut self, input: HubInput) -> Result<(), Gone> {
        match input {
            HubInput::Subscribe {
                subscription,
                generation,
            } => self.subscribe(subscription, generation),
            HubInput::Unsubscribe(address) => {
                if self.subs.remove(&address).is_some() {
                    self.ctx.metrics.silent_payments.subscriptions.dec();
                }
            }
            HubInput::Attached => self.attached = true,
            HubInput::Line(queued) if self.backlog.is_empty() => self.forward(queued).await?,
            other => self.backlog.push_back(other),
        }
        Ok(())
    }

    /// A new subscription, or one made again: either way its historical
    /// scan starts (again) from its start height.
    pub(super) fn subscribe(&mut self, subscription: SpSubscription, generation: u64) {
        let done = subscription.start_height > subscription.end_height;
        let sub = Sub {
            phase: Phase::Historical {
                cursor: SpCursor::at_height(subscription.start_height),
                range_bytes: None,
                done,
            },
            subscription,
            generation,
            page: Vec::new(),
            last_sent: Instant::now(),
            quiet_until: Instant::now() + FIRST_NOTIFICATION_DELAY,
            repeat_final_at: None,
            progress: 0.0,
            recent: BTreeMap::new(),
            sent_mempool: HashSet::new(),
            retry_at: None,
        };
        let address = sub.subscription.address.clone();
        if self.subs.insert(address, sub).is_none() {
            self.ctx.metrics.silent_payments.subscriptions.inc();
        }
    }

    /// Handles what waited in the backlog, in order.
    pub(super) async fn take(&mut self, input: HubInput) -> Result<(), Gone> {
        match input {
            HubInput::Line(queued) => self.forward(queued).await,
            HubInput::Change(change) => self.follow(Mempool::Named(&change.txids)).await,
            HubInput::Resync => self.follow(Mempool::All).await,
            other => self.receive(other).await,
        }
    }

    /// Queues a line for the session, waiting for room.
    pub(super) async fn forward(&self, queued: Queued) -> Result<(), Gone> {
        self.queue.send(queued).await.map_err(|_| Gone)
    }

    /// Sends a notification of `address`'s subscription.
    pub(super) async fn notify(
        &mut self,
        address: &str,
        progress: f64,
        history: &[SpMatch],
    ) -> Result<(), Gone> {
        let Some(sub) = self.subs.get_mut(address) else {
            return Ok(());
        };
        if sub.quiet_until > Instant::now() {
            // Rare (a new subscription's scan ends within the delay) and
            // short: the hub waits with it.
            let until = sub.quiet_until;
            sleep_until(until).await;
        }
        let Some(sub) = self.subs.get_mut(address) else {
            return Ok(());
        };
        sub.progress = sub.progress.max(progress);
        sub.last_sent = Instant::now();
        let line: Arc<str> = sub.subscription.notification(sub.progress, history).into();
        let generation = sub.generation;
        let Some(queued) = Queued::charged(line, &self.ctx.client_memory) else {
            // As the notifier does: a session the budget cannot hold
            // closes rather than wait.
            self.kick.notify_one();
            return Err(Gone);
        };
        self.forward(queued.of_sp_subscription(generation, history.len()))
            .await
    }

    /// Sends `address`'s pending page in notifications of at most
    /// `PAGE_ENTRIES`, while it holds a full one (or, `all`, to the end:
    /// the last one with `last_progress`).
    pub(super) async fn send_pages(
        &mut self,
        address: &str,
        all: bool,
        last_progress: f64,
    ) -> Result<(), Gone> {
        loop {
            let Some(sub) = self.subs.get_mut(address) else {
                return Ok(());
            };
            let full = sub.page.len() > PAGE_ENTRIES || (!all && sub.page.len() == PAGE_ENTRIES);
            if !full {
                break;
            }
            let page: Vec<SpMatch> = sub.page.drain(..PAGE_ENTRIES).collect();
            let progress = sub.progress;
            self.notify(address, progress, &page).await?;
        }
        if all {
            let page = self
                .subs
                .get_mut(address)
                .map(|sub| std::mem::take(&mut sub.page))
                .unwrap_or_default();
            self.notify(address, last_progress, &page).await?;
        }
        Ok(())
    }
}
