//! Sessions per client address: one address may hold at most
//! `sessions_per_ip_max` sessions, so that a single host cannot take the
//! whole `sessions_max`. Counts only; the accept loop refuses, the session
//! task holds a slot and gives it back when it ends.
//!
//! Exempt: 127.0.0.1 and ::1 (also as IPv4-mapped IPv6), as in Fulcrum's
//! default `subnets_to_exclude_from_per_ip_limits`. A local Tor daemon or a
//! reverse proxy connects from there on behalf of every client behind it.
//! The rest of 127.0.0.0/8 is counted like any address: nothing connects
//! from there unless set up to, and it lets tests reach the cap from
//! 127.0.0.2.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// Whether sessions from `ip` are left out of the per-address count.
pub(crate) fn is_exempt(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4 == Ipv4Addr::LOCALHOST,
        IpAddr::V6(v6) => v6 == Ipv6Addr::LOCALHOST,
    }
}

/// Live sessions per address. Holds an entry only while the address has a
/// session, so its size is bounded by the sessions (no leak).
pub(crate) struct PerIp {
    max: usize,
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// A session's place in its address' count, given back on drop.
pub(crate) struct IpSlot {
    table: Arc<PerIp>,
    /// `None` for an exempt address.
    ip: Option<IpAddr>,
}

impl PerIp {
    pub fn new(max: usize) -> Arc<PerIp> {
        Arc::new(PerIp {
            max,
            counts: Mutex::new(HashMap::new()),
        })
    }

    /// Takes a place for a session from `ip`.
    ///
    /// # Errors
    /// The cap, when `ip` already holds that many sessions.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<IpSlot, usize> {
        let ip = ip.to_canonical();
        if is_exempt(ip) {
            return Ok(IpSlot {
                table: Arc::clone(self),
                ip: None,
            });
        }
        let mut counts = self.lock();
        let count = counts.entry(ip).or_insert(0);
        if *count >= self.max {
            return Err(self.max);
        }
        *count += 1;
        Ok(IpSlot {
            table: Arc::clone(self),
            ip: Some(ip),
        })
    }

    /// Addresses holding at least one session.
    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.counts.lock().expect("per-ip lock poisoned")
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let Some(ip) = self.ip else { return };
        let mut counts = self.table.lock();
        if let Some(count) = counts.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_the_local_proxy_addresses_are_exempt() {
        for exempt in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            assert!(is_exempt(ip(exempt)), "{exempt}");
        }
        for counted in [
            "127.0.0.2",
            "10.0.0.1",
            "192.168.1.1",
            "203.0.113.7",
            "::ffff:203.0.113.7",
            "2001:db8::1",
            "fe80::1",
            "::",
        ] {
            assert!(!is_exempt(ip(counted)), "{counted}");
        }
    }

    #[test]
    fn the_cap_holds_per_address_and_slots_come_back() {
        let table = PerIp::new(2);
        let a1 = table.admit(ip("203.0.113.7")).unwrap();
        let _a2 = table.admit(ip("203.0.113.7")).unwrap();
        assert_eq!(table.admit(ip("203.0.113.7")).err(), Some(2));
        // The same address written as IPv4-mapped IPv6 is the same client.
        assert_eq!(table.admit(ip("::ffff:203.0.113.7")).err(), Some(2));
        let _b = table.admit(ip("203.0.113.8")).unwrap();
        let local: Vec<IpSlot> = (0..10)
            .map(|_| table.admit(ip("127.0.0.1")).unwrap())
            .collect();
        assert_eq!(table.addresses(), 2, "exempt addresses are not counted");
        drop(a1);
        let a3 = table.admit(ip("203.0.113.7")).unwrap();
        drop((a3, _a2, _b, local));
        assert_eq!(table.addresses(), 0, "no entry outlives its sessions");
    }
}
