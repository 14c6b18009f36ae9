//! Sessions per client address: one address may hold at most
//! `sessions_per_ip_max` sessions, so that a single host cannot take the
//! whole `sessions_max`. Counts only; the accept loop refuses, the session
//! task holds a slot and gives it back when it ends.
//!
//! An IPv6 client is counted by its network, the first `ipv6_prefix_bits`
//! bits of its address (/64 by default, [`counted_address`]): one host is
//! usually given a whole /64, so counting single addresses would let it
//! open sessions from as many as it likes. IPv4 is counted per address.
//!
//! Exempt: the `trusted_subnets`, by default 127.0.0.1/32 and ::1/128 (also
//! as IPv4-mapped IPv6), as in Fulcrum's default
//! `subnets_to_exclude_from_per_ip_limits`. A Tor daemon or a reverse proxy
//! connects from there on behalf of every client behind it; in a node
//! package it is often another container, whose network the operator names.
//! The rest of 127.0.0.0/8 is counted like any address by default: nothing
//! connects from there unless set up to, and it lets tests reach the cap
//! from 127.0.0.2.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

/// An IP network in CIDR notation, `ADDRESS/PREFIX_LENGTH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    /// The network's address, host bits zero.
    network: IpAddr,
    prefix_len: u8,
}

impl Subnet {
    /// 127.0.0.1/32 and ::1/128: a local Tor daemon or proxy.
    pub const LOOPBACK: [Subnet; 2] = [
        Subnet {
            network: IpAddr::V4(Ipv4Addr::LOCALHOST),
            prefix_len: 32,
        },
        Subnet {
            network: IpAddr::V6(Ipv6Addr::LOCALHOST),
            prefix_len: 128,
        },
    ];

    /// Whether `ip` (an IPv4-mapped IPv6 address as its IPv4 one) is in
    /// this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => mask_v4(ip, self.prefix_len) == u32::from(net),
            (IpAddr::V6(net), IpAddr::V6(ip)) => mask_v6(ip, self.prefix_len) == u128::from(net),
            _ => false,
        }
    }
}

fn mask_v4(ip: Ipv4Addr, prefix_len: u8) -> u32 {
    u32::from(ip)
        & u32::MAX
            .checked_shl(32 - u32::from(prefix_len))
            .unwrap_or(0)
}

fn mask_v6(ip: Ipv6Addr, prefix_len: u8) -> u128 {
    u128::from(ip)
        & u128::MAX
            .checked_shl(128 - u32::from(prefix_len))
            .unwrap_or(0)
}

impl FromStr for Subnet {
    type Err = String;

    /// `10.21.0.0/16`, `fd00::/8`, or a bare address (a network of one).
    /// Host bits must be zero: `10.21.21.9/16` is refused rather than read
    /// as a network its writer may not have meant.
    fn from_str(s: &str) -> Result<Subnet, String> {
        let s = s.trim();
        let (addr, len) = match s.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (s, None),
        };
        let network: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?}: {addr:?} is not an IP address"))?;
        let network = network.to_canonical();
        let bits: u8 = if network.is_ipv4() { 32 } else { 128 };
        let prefix_len = match len {
            None => bits,
            Some(len) => len
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= bits)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {bits}"))?,
        };
        let masked = match network {
            IpAddr::V4(v4) => mask_v4(v4, prefix_len) == u32::from(v4),
            IpAddr::V6(v6) => mask_v6(v6, prefix_len) == u128::from(v6),
        };
        if !masked {
            return Err(format!(
                "{s:?}: the address has bits set past the /{prefix_len} prefix"
            ));
        }
        Ok(Subnet {
            network,
            prefix_len,
        })
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// What `ip` is counted as by per-address limits: an IPv4 address (also
/// written IPv4-mapped) as itself, an IPv6 one as its network of
/// `ipv6_prefix_bits` (host bits zero).
pub(crate) fn counted_address(ip: IpAddr, ipv6_prefix_bits: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(mask_v6(v6, ipv6_prefix_bits.min(128)))),
    }
}

/// Live sessions per address. Holds an entry only while the address has a
/// session, so its size is bounded by the sessions (no leak).
pub(crate) struct PerIp {
    max: usize,
    trusted: Vec<Subnet>,
    ipv6_prefix_bits: u8,
    /// Keyed by [`counted_address`].
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// A session's place in its address' count, given back on drop.
pub(crate) struct IpSlot {
    table: Arc<PerIp>,
    /// The counted address; `None` for an exempt one.
    ip: Option<IpAddr>,
}

impl PerIp {
    pub fn new(max: usize, trusted: Vec<Subnet>, ipv6_prefix_bits: u8) -> Arc<PerIp> {
        Arc::new(PerIp {
            max,
            trusted,
            ipv6_prefix_bits,
            counts: Mutex::new(HashMap::new()),
        })
    }

    /// Takes a place for a session from `ip`.
    ///
    /// # Errors
    /// The cap, when `ip` already holds that many sessions.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<IpSlot, usize> {
        let ip = ip.to_canonical();
        if self.trusted.iter().any(|net| net.contains(ip)) {
            return Ok(IpSlot {
                table: Arc::clone(self),
                ip: None,
            });
        }
        let ip = counted_address(ip, self.ipv6_prefix_bits);
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

    fn subnet(s: &str) -> Subnet {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whether `ip` is exempt under the default trusted subnets.
    fn exempt_by_default(ip: IpAddr) -> bool {
        Subnet::LOOPBACK.iter().any(|net| net.contains(ip))
    }

    #[test]
    fn only_the_local_proxy_addresses_are_exempt_by_default() {
        for exempt in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            assert!(exempt_by_default(ip(exempt)), "{exempt}");
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
            assert!(!exempt_by_default(ip(counted)), "{counted}");
        }
        assert_eq!(
            Subnet::LOOPBACK.map(|net| net.to_string()),
            ["127.0.0.1/32", "::1/128"]
        );
    }

    #[test]
    fn subnets_hold_exactly_their_addresses() {
        let docker = subnet("10.21.0.0/16");
        for inside in [
            "10.21.0.0",
            "10.21.21.9",
            "10.21.255.255",
            "::ffff:10.21.1.1",
        ] {
            assert!(docker.contains(ip(inside)), "{inside}");
        }
        for outside in ["10.22.0.0", "10.20.255.255", "11.21.0.1", "::a15:101"] {
            assert!(!docker.contains(ip(outside)), "{outside}");
        }
        let ula = subnet("fd00::/8");
        assert!(ula.contains(ip("fdab::1")));
        assert!(!ula.contains(ip("fe80::1")));
        assert!(!ula.contains(ip("10.0.0.1")), "no IPv4 in an IPv6 network");
        let everyone = subnet("0.0.0.0/0");
        assert!(everyone.contains(ip("203.0.113.7")));
        assert!(!everyone.contains(ip("2001:db8::1")));
        assert!(subnet("::/0").contains(ip("2001:db8::1")));
        // A bare address is a network of one; a mapped one is its IPv4.
        assert_eq!(subnet("10.21.21.9"), subnet("10.21.21.9/32"));
        assert_eq!(subnet("::ffff:10.21.21.9"), subnet("10.21.21.9/32"));
        assert!(!subnet("10.21.21.9").contains(ip("10.21.21.10")));
    }

    #[test]
    fn malformed_subnets_are_refused_with_a_reason() {
        for (bad, reason) in [
            ("10.21.21.9/16", "bits set past the /16 prefix"),
            ("10.0.0.0/33", "prefix length must be 0 to 32"),
            ("fd00::/129", "prefix length must be 0 to 128"),
            ("10.0.0.0/x", "prefix length"),
            ("tor-container/24", "is not an IP address"),
            ("", "is not an IP address"),
        ] {
            let err = bad.parse::<Subnet>().unwrap_err();
            assert!(err.contains(reason), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_trusted_subnet_is_left_out_of_the_count() {
        let table = PerIp::new(1, vec![subnet("10.21.0.0/16")], 64);
        let tor: Vec<IpSlot> = (0..20)
            .map(|_| table.admit(ip("10.21.21.11")).unwrap())
            .collect();
        assert_eq!(table.addresses(), 0);
        let _one = table.admit(ip("10.22.0.1")).unwrap();
        assert_eq!(table.admit(ip("10.22.0.1")).err(), Some(1));
        // Loopback is no longer trusted once the list is given.
        let _local = table.admit(ip("127.0.0.1")).unwrap();
        assert_eq!(table.admit(ip("127.0.0.1")).err(), Some(1));
        drop(tor);
    }

    #[test]
    fn the_cap_holds_per_address_and_slots_come_back() {
        let table = PerIp::new(2, Subnet::LOOPBACK.to_vec(), 64);
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

    #[test]
    fn ipv6_clients_count_by_their_prefix() {
        let table = PerIp::new(2, Subnet::LOOPBACK.to_vec(), 64);
        // Two hosts' worth of addresses in one /64 share its two places.
        let _a = table.admit(ip("2001:db8:1:2::1")).unwrap();
        let _b = table.admit(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")).unwrap();
        assert_eq!(table.admit(ip("2001:db8:1:2:abcd::7")).err(), Some(2));
        // The next /64 is another client.
        let _c = table.admit(ip("2001:db8:1:3::1")).unwrap();
        assert_eq!(table.addresses(), 2);
        // IPv4 stays per address, also when written IPv4-mapped.
        let _d = table.admit(ip("203.0.113.7")).unwrap();
        let _e = table.admit(ip("::ffff:203.0.113.8")).unwrap();
        let _f = table.admit(ip("203.0.113.8")).unwrap();
        assert_eq!(table.admit(ip("::ffff:203.0.113.8")).err(), Some(2));
        assert_eq!(table.addresses(), 4);
        // ::1 is trusted by address, not by its /64.
        let _local: Vec<IpSlot> = (0..5).map(|_| table.admit(ip("::1")).unwrap()).collect();
        assert!(table.admit(ip("::2")).is_ok());

        // At /128 each address counts alone; at /32 a whole ISP's block
        // is one client.
        let exact = PerIp::new(1, Vec::new(), 128);
        let _g = exact.admit(ip("2001:db8::1")).unwrap();
        assert!(exact.admit(ip("2001:db8::2")).is_ok());
        let wide = PerIp::new(1, Vec::new(), 32);
        let _h = wide.admit(ip("2001:db8:ffff::1")).unwrap();
        assert_eq!(wide.admit(ip("2001:db8:1::1")).err(), Some(1));
        assert!(wide.admit(ip("2001:db9::1")).is_ok());
    }

    #[test]
    fn counted_addresses_keep_ipv4_and_cut_ipv6_to_the_prefix() {
        for (address, bits, counted) in [
            ("2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::"),
            ("2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::"),
            ("2001:db8:1:2:3:4:5:6", 56, "2001:db8:1::"),
            ("2001:db8:1:2ff:3:4:5:6", 56, "2001:db8:1:200::"),
            ("2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"),
            ("2001:db8:1:2:3:4:5:6", 32, "2001:db8::"),
            ("203.0.113.7", 64, "203.0.113.7"),
            ("::ffff:203.0.113.7", 64, "203.0.113.7"),
        ] {
            assert_eq!(
                counted_address(ip(address), bits),
                ip(counted),
                "{address}/{bits}"
            );
        }
    }
}
