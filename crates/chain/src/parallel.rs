//! Work spread over a few threads of its own, results in the items'
//! order: block fetches, which wait on files or the node and must not
//! take the rayon pool the indexer builds rows on.

use crate::Error;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `fetch` for every item on up to `workers` threads; results keep the
/// items' order. The first error wins.
pub(crate) fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    fetch: impl Fn(&T) -> Result<R, Error> + Sync,
) -> Result<Vec<R>, Error> {
    let next = AtomicUsize::new(0);
    let workers = workers.clamp(1, items.len().max(1));
    let mut results: Vec<(usize, Result<R, Error>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        let result = fetch(item);
                        let failed = result.is_err();
                        done.push((i, result));
                        if failed {
                            // Stop handing out work; others finish theirs.
                            next.store(items.len(), Ordering::Relaxed);
                            break;
                        }
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("fetch workers do not panic"))
            .collect()
    });
    results.sort_unstable_by_key(|(i, _)| *i);
    if let Some(pos) = results.iter().position(|(_, r)| r.is_err()) {
        return Err(results.swap_remove(pos).1.err().expect("an error"));
    }
    Ok(results.into_iter().filter_map(|(_, r)| r.ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_fetches_keep_order_and_report_the_first_error() {
        let items: Vec<u32> = (0..50).collect();
        let doubled = in_parallel(&items, 4, |&i| Ok(i * 2)).unwrap();
        assert_eq!(doubled, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        let failed = in_parallel(&items, 4, |&i| {
            if i == 17 {
                Err(Error::persistent("seventeen".into()))
            } else {
                Ok(i)
            }
        });
        assert_eq!(failed.unwrap_err().message(), "seventeen");
    }
}
