//! A server-wide byte budget for what clients make the server hold: request
//! lines not yet complete, replies and notifications a client has not read
//! yet, and subscriptions. Per-session limits alone do not bound the total: a
//! thousand sessions each at its own limit would hold gigabytes.
//!
//! Taking is non-blocking: a caller that cannot take what it needs refuses
//! the work (with an error the client sees) instead of waiting, so one
//! greedy client never stalls the others.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes in use out of a fixed maximum.
#[derive(Debug)]
pub struct ByteBudget {
    used: AtomicUsize,
    max: usize,
}

impl ByteBudget {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(ByteBudget {
            used: AtomicUsize::new(0),
            max,
        })
    }

    /// Takes `bytes`, or nothing if that would leave less than `keep_free`
    /// of the maximum.
    fn try_take(&self, bytes: usize, keep_free: usize) -> bool {
        let limit = self.max.saturating_sub(keep_free);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&after| after <= limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    pub fn max(&self) -> usize {
        self.max
    }
}

/// Bytes one holder has taken from a budget; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<ByteBudget>,
    bytes: usize,
}

impl Charge {
    /// A charge of nothing yet.
    pub fn new(budget: &Arc<ByteBudget>) -> Self {
        Charge {
            budget: Arc::clone(budget),
            bytes: 0,
        }
    }

    /// Makes this charge `bytes`: gives back any excess, or takes the
    /// difference. Returns false, changing nothing, when the budget cannot
    /// give the difference.
    pub fn resize(&mut self, bytes: usize) -> bool {
        self.resize_keeping_free(bytes, 0)
    }

    /// As [`Charge::resize`], but growing only while `keep_free` bytes of
    /// the budget stay free: long-lived holders (subscriptions) leave room
    /// for the short-lived ones (requests and replies in flight), so they
    /// can never stop the server from reading and answering.
    pub fn resize_keeping_free(&mut self, bytes: usize, keep_free: usize) -> bool {
        if bytes <= self.bytes {
            self.budget.give_back(self.bytes - bytes);
        } else if !self.budget.try_take(bytes - self.bytes, keep_free) {
            return false;
        }
        self.bytes = bytes;
        true
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Moves `bytes` of this charge (all of it, if it holds less) into a
    /// charge of its own, without asking the budget: what one holder hands
    /// on to another (a session's received bytes, once a whole request,
    /// to the task that answers it) stays charged throughout.
    pub fn split_off(&mut self, bytes: usize) -> Charge {
        let moved = bytes.min(self.bytes);
        self.bytes -= moved;
        Charge {
            budget: Arc::clone(&self.budget),
            bytes: moved,
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_share_the_maximum_and_give_back_on_drop() {
        let budget = ByteBudget::new(100);
        let mut a = Charge::new(&budget);
        let mut b = Charge::new(&budget);
        assert!(a.resize(60));
        assert!(!b.resize(41), "60 + 41 passes 100");
        assert_eq!(b.bytes(), 0, "a refused resize changes nothing");
        assert!(b.resize(40));
        assert_eq!(budget.used(), 100);
        assert!(a.resize(10), "shrinking always succeeds");
        let mut c = Charge::new(&budget);
        assert!(
            !c.resize_keeping_free(11, 40),
            "10 + 40 + 11 passes 100 - 40"
        );
        assert!(c.resize_keeping_free(10, 40));
        assert!(b.resize(40), "what was kept free is there for others");
        drop(c);
        assert_eq!(budget.used(), 50);
        drop(b);
        assert_eq!(budget.used(), 10);
        drop(a);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_split_charge_moves_bytes_without_asking_the_budget() {
        let budget = ByteBudget::new(100);
        let mut whole = Charge::new(&budget);
        assert!(whole.resize(100));
        let part = whole.split_off(70);
        assert_eq!((whole.bytes(), part.bytes(), budget.used()), (30, 70, 100));
        let rest = whole.split_off(50);
        assert_eq!(
            (whole.bytes(), rest.bytes()),
            (0, 30),
            "at most what it holds"
        );
        drop(part);
        assert_eq!(budget.used(), 30);
        drop(rest);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn taking_is_exact_under_contention() {
        let budget = ByteBudget::new(1000);
        let taken: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let budget = Arc::clone(&budget);
                    scope.spawn(move || {
                        let mut charges = Vec::new();
                        for _ in 0..100 {
                            let mut charge = Charge::new(&budget);
                            if charge.resize(7) {
                                charges.push(charge);
                            }
                        }
                        let bytes = charges.iter().map(Charge::bytes).sum::<usize>();
                        std::mem::forget(charges);
                        bytes
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(taken, budget.used());
        assert!(taken <= 1000 && taken > 1000 - 7, "{taken}");
    }
}
