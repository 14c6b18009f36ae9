use super::*;
use crate::fair::Scheduler;
use bitcoin::Txid;
use osprey_core::Height;
use osprey_electrum::fake::{
    fake_header, made_up_scan_keys as scan_keys, made_up_txid as txid, FakeBackend, FakeSpTx, Gate,
};
use osprey_sp::ScanKeys;
use serde_json::Value;
use std::sync::Weak;
use tokio::time::Instant;

fn paying(keys: &ScanKeys, n: u32) -> FakeSpTx {
    FakeSpTx::paying(keys, n)
}

fn decoy(n: u32) -> FakeSpTx {
    FakeSpTx::decoy(n)
}

struct Rig {
    backend: Arc<FakeBackend>,
    scheduler: Arc<Scheduler>,
    metrics: Arc<Metrics>,
    hub: SpHub,
    queue: mpsc::Receiver<Queued>,
    /// What the session would know of the subscriptions.
    generations: SpGenerations,
}

/// A hub on a fake chain of `tip + 1` blocks, its notifier attached,
/// on a two-core scheduler (one greedy slot).
fn rig(tip: u32) -> Rig {
    rig_with(tip, ByteBudget::new(usize::MAX), Arc::new(Notify::new()))
}

/// `rig`, its lines charged to `client_memory`, `kick`ing its session
/// when they do not fit.
fn rig_with(tip: u32, client_memory: Arc<ByteBudget>, kick: Arc<Notify>) -> Rig {
    let backend = Arc::new(FakeBackend::with_tip(tip));
    backend.update(|s| s.sp_enabled = true);
    let scheduler = Scheduler::with_slots(8, 2, None, crate::ScanPriority::Idle);
    let metrics = Arc::new(Metrics::default());
    let ctx = Arc::new(HubContext {
        backend: backend.clone(),
        scheduler: Arc::clone(&scheduler),
        client_memory,
        metrics: Arc::clone(&metrics),
    });
    let (tx, queue) = mpsc::channel(64);
    let hub = SpHub::start(ctx, tx, kick, 64);
    assert!(hub.send(HubInput::Attached));
    Rig {
        backend,
        scheduler,
        metrics,
        hub,
        queue,
        generations: SpGenerations::default(),
    }
}

fn subscription(keys: ScanKeys, start: u32, end: u32) -> SpSubscription {
    let address = keys.address(bitcoin::Network::Regtest);
    SpSubscription::new(
        keys,
        address,
        (Height(start), Height(end)),
        Height(end),
        false,
    )
}

/// Returns once the hub has done all it can (paused clock: the sleep
/// ends only when every task waits and no blocking work runs).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

impl Rig {
    /// Accepts a subscribe as the session does: a new generation for its
    /// address, then the hub handed it; false if the hub cannot take it.
    fn subscribe(&mut self, subscription: SpSubscription) -> bool {
        let generation = self.generations.subscribed(&subscription.address);
        self.hub.send(HubInput::Subscribe {
            subscription,
            generation,
        })
    }

    /// The next line the session would write, as JSON.
    async fn next(&mut self) -> Value {
        loop {
            let queued = tokio::time::timeout(Duration::from_secs(60), self.queue.recv())
                .await
                .expect("a line")
                .expect("the hub is alive");
            if self
                .generations
                .admit(&queued, &self.metrics.silent_payments.matches)
            {
                return serde_json::from_str(&queued.line).unwrap();
            }
        }
    }

    /// Notifications up to and including the one with progress 1.0.
    async fn until_complete(&mut self) -> Vec<Value> {
        let mut notifications = Vec::new();
        loop {
            let v = self.next().await;
            let done = v["params"][1] == 1.0;
            notifications.push(v);
            if done {
                return notifications;
            }
        }
    }

    /// Nothing the session would write is queued.
    async fn nothing_more(&mut self) {
        settle().await;
        while let Ok(queued) = self.queue.try_recv() {
            assert!(
                !self
                    .generations
                    .admit(&queued, &self.metrics.silent_payments.matches),
                "unexpected: {}",
                queued.line
            );
        }
    }

    fn change(&self, change: Change) {
        assert!(self.hub.send(HubInput::Change(Arc::new(change))));
    }

    /// Adds block `tip + 1` holding `txs`; returns its change.
    fn mine(&self, txs: Vec<FakeSpTx>) -> Change {
        self.backend.update(|s| {
            let height = s.headers.len() as u32;
            s.headers.push(fake_header(height));
            let txids: Vec<Txid> = txs.iter().map(|tx| tx.txid).collect();
            s.sp_mempool.retain(|tx| !txids.contains(&tx.txid));
            s.sp_blocks.insert(height, txs);
            Change {
                new_tip: Some((Height(height), fake_header(height))),
                txids,
                ..Change::default()
            }
        })
    }
}

fn history(v: &Value) -> Vec<(u64, String)> {
    v["params"][2]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["height"].as_u64().unwrap(),
                e["tx_hash"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Pages of at most 100, in height order, progress never going back
/// and 1.0 exactly once, at the end, with the mempool's matches; the
/// decoys never.
#[tokio::test(start_paused = true)]
async fn a_historical_scan_sends_pages_then_one_final_notification() {
    let mut rig = rig(60);
    let keys = scan_keys("alice");
    rig.backend.update(|s| {
        for height in 1..=50 {
            let n = height * 10;
            let block = (0..5)
                .map(|i| paying(&keys, n + i))
                .chain([decoy(n + 9)])
                .collect();
            s.sp_blocks.insert(height, block);
        }
        s.sp_mempool = vec![paying(&keys, 9001), decoy(9002), paying(&keys, 9003)];
    });
    assert!(rig.subscribe(subscription(keys, 0, 60)));
    let notifications = rig.until_complete().await;
    rig.nothing_more().await;
    let mut progress = 0.0;
    let mut all = Vec::new();
    for (i, v) in notifications.iter().enumerate() {
        let p = v["params"][1].as_f64().unwrap();
        assert!(p >= progress, "progress went back: {p} after {progress}");
        assert_eq!(p == 1.0, i == notifications.len() - 1);
        progress = p;
        let entries = history(v);
        assert!(entries.len() <= PAGE_ENTRIES, "{}", entries.len());
        all.extend(entries);
    }
    assert_eq!(all.len(), 252);
    let confirmed: Vec<u64> = all.iter().map(|(h, _)| *h).filter(|h| *h > 0).collect();
    assert_eq!(confirmed.len(), 250);
    assert!(confirmed.windows(2).all(|w| w[0] <= w[1]), "height order");
    let mempool: Vec<&String> = all
        .iter()
        .filter(|(h, _)| *h == 0)
        .map(|(_, t)| t)
        .collect();
    assert_eq!(mempool, [&txid(9001).to_string(), &txid(9003).to_string()]);
    assert!(
        !all.iter().any(|(_, t)| *t == txid(19).to_string()),
        "no decoy"
    );
    let m = &rig.metrics.silent_payments;
    assert_eq!(m.records_scanned.get(), 300);
    assert_eq!(m.matches.get(), 252);
    assert_eq!(m.subscriptions.get(), 1);
}

/// A scan that ends at once says nothing in the subscription's first
/// `FIRST_NOTIFICATION_DELAY`, then sends its final notification, and
/// that once more, with no history, `FINAL_REPEAT_DELAY` later; then
/// nothing (Sparrow's threading: see the constants).
#[tokio::test(start_paused = true)]
async fn a_scan_ending_at_once_waits_then_repeats_its_end_once() {
    let mut rig = rig(10);
    let keys = scan_keys("carol");
    rig.backend
        .update(|s| s.sp_blocks.insert(4, vec![paying(&keys, 4)]));
    let started = Instant::now();
    assert!(rig.subscribe(subscription(keys, 0, 10)));
    let last = rig.next().await;
    assert_eq!(started.elapsed(), FIRST_NOTIFICATION_DELAY);
    assert_eq!(last["params"][1], 1.0);
    assert_eq!(history(&last), [(4, txid(4).to_string())]);
    let again = rig.next().await;
    assert_eq!(
        started.elapsed(),
        FIRST_NOTIFICATION_DELAY + FINAL_REPEAT_DELAY
    );
    assert_eq!(again["params"][0], last["params"][0]);
    assert_eq!(again["params"][1], 1.0);
    assert_eq!(again["params"][2], serde_json::json!([]));
    tokio::time::sleep(Duration::from_secs(600)).await;
    rig.nothing_more().await;
}

/// While a scan waits (here for the one greedy slot, held), the client
/// hears from it every 5 s; then the scan runs to its end.
#[tokio::test(start_paused = true)]
async fn a_waiting_scan_says_so_every_five_seconds() {
    let mut rig = rig(10);
    let keys = scan_keys("bob");
    rig.backend
        .update(|s| s.sp_blocks.insert(3, vec![paying(&keys, 3)]));
    let held = rig.scheduler.acquire_scan(0).await;
    let started = Instant::now();
    assert!(rig.subscribe(subscription(keys, 0, 10)));
    for beat in 1..=2 {
        let v = rig.next().await;
        assert_eq!(started.elapsed(), HEARTBEAT * beat);
        assert_eq!(v["params"][1], 0.0);
        assert_eq!(v["params"][2], serde_json::json!([]));
    }
    drop(held);
    let v = rig.next().await;
    assert_eq!(v["params"][1], 1.0);
    assert_eq!(history(&v), [(3, txid(3).to_string())]);
}

/// A mempool payment is sent once: not again in a later mempool
/// change, nor when it confirms; a new one and a block's are sent.
#[tokio::test(start_paused = true)]
async fn a_mempool_payment_is_sent_once() {
    let mut rig = rig(10);
    let keys = scan_keys("carol");
    let (in_pool, later) = (paying(&keys, 100), paying(&keys, 101));
    rig.backend.update(|s| s.sp_mempool = vec![in_pool.clone()]);
    let subscription = subscription(scan_keys("carol"), 0, 10);
    assert!(rig.subscribe(subscription));
    let v = rig.until_complete().await;
    assert_eq!(history(&v[0]), [(0, txid(100).to_string())]);
    // The same transaction named again: nothing new.
    rig.change(Change {
        txids: vec![txid(100)],
        ..Change::default()
    });
    rig.nothing_more().await;
    // Another enters the mempool: sent, with height 0.
    rig.backend.update(|s| s.sp_mempool.push(later.clone()));
    rig.change(Change {
        txids: vec![txid(101)],
        ..Change::default()
    });
    let v = rig.next().await;
    assert_eq!(v["params"][1], 1.0);
    assert_eq!(history(&v), [(0, txid(101).to_string())]);
    // Both confirm, with a third paid in the block: only the third.
    let change = rig.mine(vec![in_pool, decoy(102), later, paying(&keys, 103)]);
    rig.change(change);
    let v = rig.next().await;
    assert_eq!(history(&v), [(11, txid(103).to_string())]);
    rig.nothing_more().await;
    // A block with nothing for us: no notification.
    let change = rig.mine(vec![decoy(104)]);
    rig.change(change);
    rig.nothing_more().await;
}

/// After a reorg, the blocks from the fork are scanned again and their
/// matches sent again.
#[tokio::test(start_paused = true)]
async fn a_reorg_rescans_from_the_fork() {
    let mut rig = rig(20);
    let keys = scan_keys("dave");
    rig.backend.update(|s| {
        s.sp_blocks.insert(10, vec![paying(&keys, 10)]);
        s.sp_blocks.insert(19, vec![paying(&keys, 19)]);
    });
    assert!(rig.subscribe(subscription(scan_keys("dave"), 0, 20)));
    rig.until_complete().await;
    // Blocks 19 and 20 are replaced; the new 20 pays us too.
    let header = rig.backend.update(|s| {
        for height in [19, 20] {
            s.headers[height][78] = 1;
        }
        s.sp_blocks.insert(20, vec![paying(&keys, 20)]);
        s.headers[20]
    });
    rig.change(Change {
        new_tip: Some((Height(20), header)),
        all_scripthashes: true,
        ..Change::default()
    });
    let v = rig.next().await;
    assert_eq!(
        history(&v),
        [(19, txid(19).to_string()), (20, txid(20).to_string())]
    );
    rig.nothing_more().await;
}

/// A range subscription scans its range, then follows the tip from
/// where it was at subscribe: blocks between the range's end and that
/// tip are not its own.
#[tokio::test(start_paused = true)]
async fn a_range_follows_the_tip_not_its_end() {
    let mut rig = rig(10);
    let keys = scan_keys("judy");
    rig.backend.update(|s| {
        s.sp_blocks.insert(4, vec![paying(&keys, 4)]);
        s.sp_blocks.insert(8, vec![paying(&keys, 8)]);
    });
    let range = scan_keys("judy");
    let address = range.address(bitcoin::Network::Regtest);
    let subscription =
        SpSubscription::new(range, address, (Height(2), Height(5)), Height(10), false);
    assert!(rig.subscribe(subscription));
    let v = rig.until_complete().await;
    let all: Vec<_> = v.iter().flat_map(history).collect();
    assert_eq!(all, [(4, txid(4).to_string())]);
    rig.nothing_more().await;
    let change = rig.mine(vec![paying(&keys, 11)]);
    rig.change(change);
    assert_eq!(history(&rig.next().await), [(11, txid(11).to_string())]);
}

/// After the change feed lagged, a following subscription catches up
/// on everything: new blocks and the whole mempool, nothing twice.
#[tokio::test(start_paused = true)]
async fn a_lagged_feed_catches_up_on_blocks_and_the_whole_mempool() {
    let mut rig = rig(10);
    let keys = scan_keys("kate");
    rig.backend
        .update(|s| s.sp_mempool = vec![paying(&keys, 60)]);
    assert!(rig.subscribe(subscription(scan_keys("kate"), 0, 10)));
    rig.until_complete().await;
    // Missed: a block paying us, and a mempool payment.
    rig.mine(vec![paying(&keys, 11)]);
    rig.backend.update(|s| s.sp_mempool.push(paying(&keys, 61)));
    assert!(rig.hub.send(HubInput::Resync));
    let v = rig.next().await;
    assert_eq!(
        history(&v),
        [(11, txid(11).to_string()), (0, txid(61).to_string())]
    );
    rig.nothing_more().await;
}

/// Subscribing again starts the historical scan again, mempool
/// included, with its own notifications to 1.0.
#[tokio::test(start_paused = true)]
async fn subscribing_again_scans_again() {
    let mut rig = rig(10);
    let keys = scan_keys("erin");
    rig.backend.update(|s| {
        s.sp_blocks.insert(5, vec![paying(&keys, 5)]);
        s.sp_mempool = vec![paying(&keys, 50)];
    });
    for _ in 0..2 {
        assert!(rig.subscribe(subscription(scan_keys("erin"), 0, 10)));
        let v = rig.until_complete().await;
        let all: Vec<_> = v.iter().flat_map(history).collect();
        assert_eq!(all, [(5, txid(5).to_string()), (0, txid(50).to_string())]);
    }
    assert_eq!(rig.metrics.silent_payments.subscriptions.get(), 1);
}

/// Unsubscribing drops the keys, even with a chunk waiting for a slot;
/// so does the end of the session (its hub dropped).
#[tokio::test(start_paused = true)]
async fn unsubscribing_and_ending_drop_the_keys() {
    let mut rig = rig(10);
    let held = rig.scheduler.acquire_scan(0).await;
    let first = subscription(scan_keys("frank"), 0, 10);
    let first_keys: Weak<ScanKeys> = Arc::downgrade(&first.keys);
    let address = first.address.clone();
    assert!(rig.subscribe(first));
    settle().await;
    assert!(first_keys.upgrade().is_some(), "held while subscribed");
    assert!(rig.hub.send(HubInput::Unsubscribe(address)));
    settle().await;
    assert_eq!(rig.metrics.silent_payments.subscriptions.get(), 0);
    // The waiting chunk still holds them until it runs.
    drop(held);
    settle().await;
    assert!(
        first_keys.upgrade().is_none(),
        "dropped with the subscription"
    );
    rig.nothing_more().await;

    let held = rig.scheduler.acquire_scan(0).await;
    let second = subscription(scan_keys("grace"), 0, 10);
    let second_keys = Arc::downgrade(&second.keys);
    assert!(rig.subscribe(second));
    settle().await;
    assert!(second_keys.upgrade().is_some());
    let Rig { hub, metrics, .. } = rig;
    drop(hub);
    settle().await;
    assert!(second_keys.upgrade().is_none(), "dropped with the session");
    assert_eq!(metrics.silent_payments.subscriptions.get(), 0);
    drop(held);
}

/// A notification the client memory budget cannot hold closes the
/// session, as the notifier does: the hub kicks it and ends, its keys
/// with it, rather than wait or hold more than the budget. A budget
/// with room for it gets it.
#[tokio::test(start_paused = true)]
async fn a_notification_over_the_memory_budget_closes_the_session() {
    let keys = scan_keys("mallory");
    let notification_bytes = {
        let mut rig = rig(10);
        rig.backend
            .update(|s| s.sp_blocks.insert(4, vec![paying(&keys, 4)]));
        let sub = subscription(scan_keys("mallory"), 0, 10);
        assert!(rig.subscribe(sub));
        let v = rig.next().await;
        assert_eq!(history(&v), [(4, txid(4).to_string())]);
        v.to_string().len()
    };
    for (budget_bytes, fits) in [
        (notification_bytes * 2, true),
        (notification_bytes / 2, false),
    ] {
        let budget = ByteBudget::new(budget_bytes);
        let kick = Arc::new(Notify::new());
        let mut rig = rig_with(10, Arc::clone(&budget), Arc::clone(&kick));
        rig.backend
            .update(|s| s.sp_blocks.insert(4, vec![paying(&keys, 4)]));
        let sub = subscription(scan_keys("mallory"), 0, 10);
        let held_keys = Arc::downgrade(&sub.keys);
        assert!(rig.subscribe(sub));
        if fits {
            assert_eq!(history(&rig.next().await), [(4, txid(4).to_string())]);
            assert!(held_keys.upgrade().is_some(), "still subscribed");
            continue;
        }
        tokio::time::timeout(Duration::from_secs(60), kick.notified())
            .await
            .expect("the session is kicked");
        settle().await;
        assert!(
            held_keys.upgrade().is_none(),
            "the hub ended, its keys with it"
        );
        assert!(rig.queue.try_recv().is_err(), "nothing queued");
        assert_eq!(budget.used(), 0, "nothing held against the budget");
        assert_eq!(rig.metrics.silent_payments.subscriptions.get(), 0);
    }
}

/// The session's lines that follow a change wait until the hub has
/// scanned that change: the silent-payments notification goes first.
/// Lines with no change before them go at once.
#[tokio::test(start_paused = true)]
async fn lines_after_a_change_wait_for_its_scan() {
    let mut rig = rig(10);
    let keys = scan_keys("heidi");
    assert!(rig.subscribe(subscription(scan_keys("heidi"), 0, 10)));
    rig.until_complete().await;
    let line = |text: &str| {
        HubInput::Line(Queued::charged(text.into(), &ByteBudget::new(usize::MAX)).unwrap())
    };
    assert!(rig.hub.send(line("{\"before\":1}")));
    assert_eq!(rig.next().await["before"], 1);
    let held = rig.scheduler.acquire_scan(0).await;
    let change = rig.mine(vec![paying(&keys, 11)]);
    rig.change(change);
    assert!(rig.hub.send(line("{\"scripthash\":1}")));
    rig.nothing_more().await;
    drop(held);
    let first = rig.next().await;
    assert_eq!(history(&first), [(11, txid(11).to_string())]);
    assert_eq!(rig.next().await["scripthash"], 1);
}

/// However many scan, they hold the greedy slots only (one, on two
/// cores), and an ordinary line takes a slot at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_share_the_greedy_slots_and_wallets_are_served() {
    let mut rig = rig(10);
    let gate = Arc::new(Gate::default());
    rig.backend
        .update(|s| s.sp_scan_gate = Some(Arc::clone(&gate)));
    let ctx = Arc::new(HubContext {
        backend: rig.backend.clone(),
        scheduler: Arc::clone(&rig.scheduler),
        client_memory: ByteBudget::new(usize::MAX),
        metrics: Arc::default(),
    });
    let mut others = Vec::new();
    for i in 0..3 {
        let (tx, queue) = mpsc::channel(8);
        let hub = SpHub::start(Arc::clone(&ctx), tx, Arc::new(Notify::new()), 8);
        assert!(hub.send(HubInput::Attached));
        assert!(hub.send(HubInput::Subscribe {
            subscription: subscription(scan_keys(&format!("o{i}")), 0, 10),
            generation: 1,
        }));
        others.push((hub, queue));
    }
    assert!(rig.subscribe(subscription(scan_keys("ivan"), 0, 10)));
    let reached = {
        let gate = Arc::clone(&gate);
        tokio::task::spawn_blocking(move || gate.wait_reached(Duration::from_secs(30)))
            .await
            .unwrap()
    };
    assert!(reached, "a scan runs");
    let mut polls = 0;
    while rig.scheduler.greedy_waiting() < 3 {
        polls += 1;
        assert!(polls < 1_000_000, "the other scans queue");
        tokio::task::yield_now().await;
    }
    assert_eq!(rig.backend.update(|s| s.sp_scan_calls), 1, "one at a time");
    let wallet = tokio::time::timeout(Duration::from_secs(10), rig.scheduler.acquire(0, false))
        .await
        .expect("a wallet's line is not held up by scans");
    drop(wallet);
    gate.open();
    for (_, queue) in &mut others {
        loop {
            let queued = tokio::time::timeout(Duration::from_secs(30), queue.recv())
                .await
                .expect("the scan ends")
                .expect("the hub is alive");
            let v: Value = serde_json::from_str(&queued.line).unwrap();
            if v["params"][1] == 1.0 {
                break;
            }
        }
    }
}

/// Issue 35: the session writes a subscribe's response before it hands
/// the hub the subscription; a repeat of the address's earlier scan's end
/// falling due in between was queued after that response, where the
/// client reads it as the new scan ending with nothing. The session now
/// drops it: what follows the response is the new scan's end.
#[tokio::test(start_paused = true)]
async fn a_stale_repeated_end_never_follows_a_new_subscribe() {
    let mut rig = rig(10);
    let keys = scan_keys("olivia");
    rig.backend
        .update(|s| s.sp_blocks.insert(4, vec![paying(&keys, 4)]));
    assert!(rig.subscribe(subscription(scan_keys("olivia"), 0, 10)));
    let first = rig.next().await;
    assert_eq!(history(&first), [(4, txid(4).to_string())]);
    // The client subscribes again: the session accepts it and writes the
    // response; before it hands the hub the subscription, the old end
    // falls due and is queued.
    let again = subscription(scan_keys("olivia"), 0, 10);
    let generation = rig.generations.subscribed(&again.address);
    tokio::time::sleep(FINAL_REPEAT_DELAY).await;
    settle().await;
    let stale = rig.queue.try_recv().expect("the old end, repeated");
    assert_eq!(stale.line, first_repeated(&first));
    assert!(
        !rig.generations
            .admit(&stale, &rig.metrics.silent_payments.matches),
        "dropped by the session"
    );
    assert!(rig.hub.send(HubInput::Subscribe {
        subscription: again,
        generation,
    }));
    let after_response = rig.next().await;
    assert_eq!(after_response["params"][1], 1.0);
    assert_eq!(history(&after_response), [(4, txid(4).to_string())]);
}

/// `first`, a final notification, as its repeat (no history) is written.
fn first_repeated(first: &Value) -> Arc<str> {
    let mut repeat = first.clone();
    repeat["params"][2] = serde_json::json!([]);
    repeat.to_string().into()
}

/// The session writes a line of the client's current subscriptions and
/// any untagged line; not one of a subscription replaced or unsubscribed.
/// `osprey_sp_matches_total` counts the transactions of the lines written.
#[test]
fn the_session_writes_only_current_subscriptions_lines() {
    let budget = ByteBudget::new(usize::MAX);
    let line = |generation: Option<u64>| {
        let queued = Queued::charged("{}".into(), &budget).unwrap();
        match generation {
            Some(generation) => queued.of_sp_subscription(generation, 3),
            None => queued,
        }
    };
    let matches = osprey_metrics::IntCounter::new("matches", "test").unwrap();
    let mut generations = SpGenerations::default();
    let alice = generations.subscribed("alice");
    let bob = generations.subscribed("bob");
    assert!(generations.admit(&line(None), &matches));
    assert!(generations.admit(&line(Some(alice)), &matches));
    assert_eq!(matches.get(), 3);
    let alice_again = generations.subscribed("alice");
    assert!(!generations.admit(&line(Some(alice)), &matches), "replaced");
    assert_eq!(matches.get(), 3, "a dropped line is not counted");
    assert!(generations.admit(&line(Some(alice_again)), &matches));
    assert!(generations.admit(&line(Some(bob)), &matches));
    generations.unsubscribed("bob");
    assert!(
        !generations.admit(&line(Some(bob)), &matches),
        "unsubscribed"
    );
    assert!(generations.admit(&line(Some(alice_again)), &matches));
    assert!(generations.admit(&line(None), &matches));
    assert_eq!(matches.get(), 12);
}
