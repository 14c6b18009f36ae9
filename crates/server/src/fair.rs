//! Which request runs next when every handler slot is busy: each waits as
//! if it had arrived later by what its session has cost the server lately.
//! A greedy client (one re-asking a big history as fast as it can, fifty
//! of them) then queues behind the wallet next to it and slows itself, not
//! others; sessions that cost alike are served in arrival order, and no
//! request waits longer than its own session's cost beyond that order.
//! ElectrumX's session cost is the model; where ElectrumX sleeps a session
//! over its limit even on an idle server, here cost only orders the queue,
//! so a lone big wallet is never slowed down.
//!
//! A session's cost is the time its requests held a handler slot, decayed
//! with a half-life of [`COST_HALF_LIFE`]. Answers from the status cache
//! run on the session's own task and take no slot.

use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How fast a session's cost is forgiven.
const COST_HALF_LIFE: Duration = Duration::from_secs(10);

/// Handler slots and the requests waiting for one.
pub(crate) struct Scheduler {
    slots: usize,
    /// The clock of the queue's keys.
    epoch: Instant,
    queue: Mutex<Queue>,
}

struct Queue {
    running: usize,
    waiting: BinaryHeap<Waiter>,
    /// Arrival order, to break ties between equal costs.
    arrivals: u64,
}

struct Waiter {
    /// Microseconds since `epoch` at arrival, plus the session's cost.
    key: u64,
    arrival: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        (self.key, self.arrival) == (other.key, other.arrival)
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    /// The heap's greatest is the lowest key, then the first to come.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.key, other.arrival).cmp(&(self.key, self.arrival))
    }
}

/// A handler slot, given back when dropped.
pub(crate) struct Slot {
    scheduler: Arc<Scheduler>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.scheduler.release();
    }
}

impl Scheduler {
    /// A scheduler of `slots` handler slots (at least one).
    pub fn new(slots: usize) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            slots: slots.max(1),
            epoch: Instant::now(),
            queue: Mutex::new(Queue {
                running: 0,
                waiting: BinaryHeap::new(),
                arrivals: 0,
            }),
        })
    }

    /// Waits for a slot, queued as if it came `cost` microseconds later
    /// than it did. Cancel-safe: a slot handed to a waiter that went away
    /// is passed on.
    pub async fn acquire(self: &Arc<Self>, cost: u64) -> Slot {
        let waiting = {
            let mut queue = self.lock();
            if queue.running < self.slots {
                queue.running += 1;
                return Slot {
                    scheduler: Arc::clone(self),
                };
            }
            let (wake, woken) = oneshot::channel();
            queue.arrivals += 1;
            let arrival = queue.arrivals;
            let now = self.epoch.elapsed().as_micros() as u64;
            queue.waiting.push(Waiter {
                key: now.saturating_add(cost),
                arrival,
                wake,
            });
            woken
        };
        /// Passes on a slot handed over after the wait was given up.
        struct Waiting {
            woken: Option<oneshot::Receiver<()>>,
            scheduler: Arc<Scheduler>,
        }
        impl Drop for Waiting {
            fn drop(&mut self) {
                if let Some(mut woken) = self.woken.take() {
                    woken.close();
                    if woken.try_recv().is_ok() {
                        self.scheduler.release();
                    }
                }
            }
        }
        let mut guard = Waiting {
            woken: Some(waiting),
            scheduler: Arc::clone(self),
        };
        let woken = guard.woken.as_mut().expect("set above");
        // The sender is only dropped after a send, or with the scheduler,
        // which `guard` keeps alive.
        let _ = woken.await;
        guard.woken = None;
        Slot {
            scheduler: Arc::clone(self),
        }
    }

    /// Hands a freed slot to the first waiter still there, or frees it.
    fn release(&self) {
        let mut queue = self.lock();
        while let Some(waiter) = queue.waiting.pop() {
            if waiter.wake.send(()).is_ok() {
                return;
            }
        }
        queue.running -= 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // The lock is never held across anything that can panic.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one session has cost lately, in microseconds of handler time.
pub(crate) struct SessionCost {
    micros: f64,
    at: Instant,
}

impl SessionCost {
    pub fn new() -> SessionCost {
        SessionCost {
            micros: 0.0,
            at: Instant::now(),
        }
    }

    /// The cost as of now, after decay.
    pub fn now(&mut self) -> u64 {
        let now = Instant::now();
        let halvings = now.duration_since(self.at).as_secs_f64() / COST_HALF_LIFE.as_secs_f64();
        self.micros *= 0.5f64.powf(halvings);
        self.at = now;
        self.micros as u64
    }

    /// Adds a request that held a slot for `held`.
    pub fn charge(&mut self, held: Duration) {
        self.now();
        self.micros += held.as_secs_f64() * 1e6;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With every slot taken, requests of sessions that cost little go
    /// before those of sessions that cost a lot (here seconds of handler
    /// time), even ones that came earlier; equal costs in arrival order.
    #[tokio::test]
    async fn a_freed_slot_goes_to_the_cheapest_waiter() {
        let scheduler = Scheduler::new(1);
        let held = scheduler.acquire(0).await;
        let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        let waiters = [
            ("greedy", 900_000),
            ("light", 5),
            ("greedier", 5_000_000),
            ("light too", 5),
        ];
        for (name, cost) in waiters {
            let scheduler = Arc::clone(&scheduler);
            let order_tx = order_tx.clone();
            tasks.push(tokio::spawn(async move {
                let _slot = scheduler.acquire(cost).await;
                order_tx.send(name).unwrap();
            }));
            // Queued in this order.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        drop(order_tx);
        let mut served = Vec::new();
        while let Some(name) = order.recv().await {
            served.push(name);
        }
        assert_eq!(served, ["light", "light too", "greedy", "greedier"]);
    }

    /// A waiter that gives up does not take a slot with it.
    #[tokio::test]
    async fn a_cancelled_wait_passes_the_slot_on() {
        let scheduler = Scheduler::new(1);
        let held = scheduler.acquire(0).await;
        let cancelled = {
            let scheduler = Arc::clone(&scheduler);
            tokio::spawn(async move {
                let _slot = scheduler.acquire(1).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        cancelled.abort();
        let _ = cancelled.await;
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), scheduler.acquire(2))
            .await
            .expect("the slot is free again");
    }

    #[test]
    fn cost_halves_every_half_life() {
        let mut cost = SessionCost::new();
        cost.charge(Duration::from_millis(8));
        assert!((7_900..=8_000).contains(&cost.now()), "{}", cost.now());
        cost.at -= COST_HALF_LIFE * 2;
        let quartered = cost.now();
        assert!((1_970..=2_000).contains(&quartered), "{quartered}");
    }
}
