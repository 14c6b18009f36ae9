//! Long histories, written once and shared by every session that asks.
//!
//! Fifty sessions re-asking the history of one script with 26,000
//! transactions made the server read and serialize it fifty times a round:
//! ~65 ms of a core each, and a well-behaved wallet beside them waited
//! seconds (`scripts/hostile.py`, phase amplification). Here the history's
//! JSON text is kept with the status it hashes to, and handed out (an
//! `Arc`, not a copy) for as long as the backend's cached status of the
//! script is that status; a history being built is waited for, not built
//! again beside it.
//!
//! Exactness: a status hashes every `(txid, height)` of the history, and
//! an entry's fee is fixed by its txid, so a history text that hashes to
//! the script's current status is its current answer. The backend caches a
//! status only while nothing changed since it read the state it computed
//! it from, and drops it when the script changes (`osprey_query`'s
//! `StatusCache`), so "the cached status equals the text's" is checked on
//! every use, including by sessions that waited for someone else's build.
//!
//! Memory: at most [`SharedHistories::new`]'s `bytes_max` of text, oldest
//! first out; histories under [`SHARED_MIN_BYTES`] are cheaper to build
//! than to keep, and are not kept.

use crate::scripthash::history_text;
use osprey_answers::{Backend, Error, HistoryEntry};
use osprey_core::{ScriptHash, StatusHash};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Histories whose text is shorter than this are built for each request.
pub const SHARED_MIN_BYTES: usize = 16 * 1024;

/// A history's text and the status it hashes to.
#[derive(Clone)]
struct Shared {
    status: StatusHash,
    text: Arc<str>,
}

#[derive(Default)]
struct Kept {
    texts: HashMap<ScriptHash, (u64, Shared)>,
    /// Insertion order, for eviction: `(sequence, script)`; entries whose
    /// sequence no longer matches were replaced and are skipped.
    order: VecDeque<(u64, ScriptHash)>,
    bytes: usize,
    sequence: u64,
}

/// A build in progress, which others asking for the same script wait for.
#[derive(Default)]
struct Flight {
    result: Mutex<Option<Option<Shared>>>,
    done: Condvar,
}

pub(super) struct SharedHistories {
    bytes_max: usize,
    kept: Mutex<Kept>,
    flights: Mutex<HashMap<ScriptHash, Arc<Flight>>>,
}

/// Ends a flight when dropped, with what was built or (a panic, an error)
/// nothing, so that waiters never wait for a build that is gone.
struct Landing<'a> {
    owner: &'a SharedHistories,
    scripthash: ScriptHash,
    flight: Arc<Flight>,
    result: Option<Shared>,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        lock(&self.owner.flights).remove(&self.scripthash);
        *lock(&self.flight.result) = Some(self.result.take());
        self.flight.done.notify_all();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while these locks are held.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl SharedHistories {
    /// Keeps at most `bytes_max` bytes of history text (none when 0).
    pub fn new(bytes_max: usize) -> Self {
        SharedHistories {
            bytes_max,
            kept: Mutex::new(Kept::default()),
            flights: Mutex::new(HashMap::new()),
        }
    }

    /// The history of `scripthash` as JSON text ([`history_text`]; `None`
    /// past `max` bytes), shared when it is current (see the module docs),
    /// else built from the backend's entries, by one thread at a time per
    /// script.
    ///
    /// # Errors
    /// The backend's.
    pub fn history(
        &self,
        backend: &dyn Backend,
        scripthash: &ScriptHash,
        max: usize,
    ) -> Result<Option<Arc<str>>, Error> {
        let build = |entries: &[HistoryEntry]| history_text(entries, max).map(Arc::from);
        if let Some(text) = self.current(backend, scripthash) {
            return Ok(Some(text));
        }
        let flight = {
            let mut flights = lock(&self.flights);
            match flights.get(scripthash) {
                Some(flight) => Err(Arc::clone(flight)),
                None => {
                    let flight = Arc::new(Flight::default());
                    flights.insert(*scripthash, Arc::clone(&flight));
                    Ok(flight)
                }
            }
        };
        let flight = match flight {
            Ok(flight) => flight,
            Err(other) => {
                // Someone is building it: wait, then use it if it is
                // current, else build our own (outside any flight).
                let mut result = lock(&other.result);
                while result.is_none() {
                    result = other.done.wait(result).unwrap_or_else(|e| e.into_inner());
                }
                let landed = result.clone().flatten();
                drop(result);
                if let Some(shared) = landed {
                    if backend.cached_status(scripthash) == Some(Some(shared.status)) {
                        return Ok(Some(shared.text));
                    }
                }
                return Ok(build(&backend.history(scripthash)?));
            }
        };
        let mut landing = Landing {
            owner: self,
            scripthash: *scripthash,
            flight,
            result: None,
        };
        let entries = backend.history(scripthash)?;
        let status = StatusHash::of_history(entries.iter().map(|e| (&e.txid, e.height)));
        let text = build(&entries);
        drop(entries);
        if let (Some(status), Some(text)) = (status, &text) {
            if text.len() >= SHARED_MIN_BYTES {
                let shared = Shared {
                    status,
                    text: Arc::clone(text),
                };
                self.keep(*scripthash, shared.clone());
                landing.result = Some(shared);
            }
        }
        drop(landing);
        Ok(text)
    }

    /// The length of the text kept for `scripthash`, current or not.
    pub fn kept_len(&self, scripthash: &ScriptHash) -> Option<usize> {
        lock(&self.kept)
            .texts
            .get(scripthash)
            .map(|(_, shared)| shared.text.len())
    }

    /// The kept text of `scripthash`, if it hashes to the cached status.
    fn current(&self, backend: &dyn Backend, scripthash: &ScriptHash) -> Option<Arc<str>> {
        let (_, shared) = lock(&self.kept).texts.get(scripthash).cloned()?;
        (backend.cached_status(scripthash) == Some(Some(shared.status))).then_some(shared.text)
    }

    fn keep(&self, scripthash: ScriptHash, shared: Shared) {
        let len = shared.text.len();
        if len > self.bytes_max {
            return;
        }
        let mut kept = lock(&self.kept);
        kept.sequence += 1;
        let sequence = kept.sequence;
        if let Some((_, old)) = kept.texts.insert(scripthash, (sequence, shared)) {
            kept.bytes -= old.text.len();
        }
        kept.bytes += len;
        kept.order.push_back((sequence, scripthash));
        while kept.bytes > self.bytes_max {
            let Some((sequence, oldest)) = kept.order.pop_front() else {
                break;
            };
            if kept.texts.get(&oldest).is_some_and(|(s, _)| *s == sequence) {
                if let Some((_, gone)) = kept.texts.remove(&oldest) {
                    kept.bytes -= gone.text.len();
                }
            }
        }
        // Replaced entries leave stale keys behind: compact them away
        // before they outnumber the live ones.
        if kept.order.len() > 2 * kept.texts.len() + 16 {
            let Kept { texts, order, .. } = &mut *kept;
            order.retain(|(s, key)| texts.get(key).is_some_and(|(live, _)| live == s));
        }
    }

    /// Bytes of text kept.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        lock(&self.kept).bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeBackend, Gate};
    use bitcoin::hashes::Hash;
    use bitcoin::Txid;
    use std::time::Duration;

    const SCRIPT: ScriptHash = ScriptHash([7; 32]);

    /// A history of `len` confirmed entries, long enough to be shared
    /// from 200 on.
    fn history(len: u32, salt: u8) -> Vec<HistoryEntry> {
        (0..len)
            .map(|i| {
                let mut txid = [salt; 32];
                txid[..4].copy_from_slice(&i.to_le_bytes());
                HistoryEntry {
                    txid: Txid::from_byte_array(txid),
                    height: i64::from(i + 1),
                    fee: None,
                }
            })
            .collect()
    }

    fn backend(entries: Vec<HistoryEntry>, cached: bool) -> FakeBackend {
        let backend = FakeBackend::with_tip(10);
        backend.update(|s| {
            s.history_entries_max = usize::MAX;
            s.histories.insert(SCRIPT, entries);
            if cached {
                s.cached.insert(SCRIPT);
            }
        });
        backend
    }

    fn calls(backend: &FakeBackend) -> usize {
        backend.update(|s| s.history_calls)
    }

    /// While the cached status is the text's, every ask gets the same text
    /// without reading the history again; once the history changes (and
    /// with it the status), the next ask reads and shares the new one.
    #[test]
    fn a_long_history_is_read_once_while_its_status_holds() {
        let backend = backend(history(500, 1), true);
        let shared = SharedHistories::new(1 << 20);
        let first = shared
            .history(&backend, &SCRIPT, usize::MAX)
            .unwrap()
            .unwrap();
        assert!(first.len() >= SHARED_MIN_BYTES, "{}", first.len());
        for _ in 0..5 {
            let again = shared
                .history(&backend, &SCRIPT, usize::MAX)
                .unwrap()
                .unwrap();
            assert!(Arc::ptr_eq(&first, &again), "the same text, not a copy");
        }
        assert_eq!(calls(&backend), 1);
        backend.update(|s| s.histories.insert(SCRIPT, history(501, 1)));
        let changed = shared
            .history(&backend, &SCRIPT, usize::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(calls(&backend), 2);
        assert_eq!(
            &*changed,
            &*history_text(&history(501, 1), usize::MAX).unwrap()
        );
    }

    /// Without a cached status nothing vouches for a kept text: each ask
    /// reads the history; and short histories are not kept at all.
    #[test]
    fn nothing_is_shared_without_a_cached_status_or_for_short_histories() {
        let uncached = backend(history(500, 1), false);
        let shared = SharedHistories::new(1 << 20);
        for _ in 0..3 {
            shared.history(&uncached, &SCRIPT, usize::MAX).unwrap();
        }
        assert_eq!(calls(&uncached), 3);
        let short = backend(history(3, 1), true);
        let shared = SharedHistories::new(1 << 20);
        for _ in 0..3 {
            shared.history(&short, &SCRIPT, usize::MAX).unwrap();
        }
        assert_eq!(calls(&short), 3);
        assert_eq!(shared.bytes(), 0);
    }

    /// Sessions asking while a history is being read wait for that read
    /// and share its text: one read for all of them.
    #[test]
    fn asks_during_a_build_wait_for_it() {
        let backend = Arc::new(backend(history(500, 1), true));
        let gate = Arc::new(Gate::default());
        backend.update(|s| s.history_gate = Some((SCRIPT, Arc::clone(&gate))));
        let shared = Arc::new(SharedHistories::new(1 << 20));
        let asks: Vec<_> = (0..4)
            .map(|_| {
                let (backend, shared) = (Arc::clone(&backend), Arc::clone(&shared));
                std::thread::spawn(move || {
                    shared
                        .history(&*backend, &SCRIPT, usize::MAX)
                        .unwrap()
                        .unwrap()
                })
            })
            .collect();
        assert!(
            gate.wait_reached(Duration::from_secs(10)),
            "a build started"
        );
        // The others are in the flight or about to join it; none has read.
        assert_eq!(calls(&backend), 1);
        gate.open();
        let texts: Vec<Arc<str>> = asks.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(texts.iter().all(|t| Arc::ptr_eq(t, &texts[0])));
        assert_eq!(calls(&backend), 1);
    }

    /// Past the byte bound the oldest text goes; a text over the reply
    /// limit is no text.
    #[test]
    fn kept_text_stays_within_its_bound() {
        let one = history_text(&history(500, 1), usize::MAX).unwrap().len();
        let shared = SharedHistories::new(one * 2 + one / 2);
        let backend = FakeBackend::with_tip(10);
        backend.update(|s| s.history_entries_max = usize::MAX);
        for salt in 0..4u8 {
            let script = ScriptHash([salt; 32]);
            backend.update(|s| {
                s.histories.insert(script, history(500, salt));
                s.cached.insert(script);
            });
            shared.history(&backend, &script, usize::MAX).unwrap();
            assert!(shared.bytes() <= one * 2 + one / 2, "{}", shared.bytes());
        }
        assert_eq!(shared.bytes(), one * 2, "the two newest");
        let before = calls(&backend);
        shared
            .history(&backend, &ScriptHash([3; 32]), usize::MAX)
            .unwrap();
        assert_eq!(calls(&backend), before, "the newest is kept");
        shared
            .history(&backend, &ScriptHash([0; 32]), usize::MAX)
            .unwrap();
        assert_eq!(calls(&backend), before + 1, "the oldest is gone");
        assert_eq!(
            shared
                .history(&backend, &ScriptHash([1; 32]), one - 1)
                .unwrap(),
            None
        );
    }
}
