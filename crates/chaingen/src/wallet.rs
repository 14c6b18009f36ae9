//! The benchmark's "big wallet": BIP84 (`wpkh`) keys at m/84'/1'/0'/{0,1}/i
//! of the BIP39 test mnemonic "abandon abandon ... about" (no passphrase),
//! and its output descriptors with their BIP380 checksums. Knows nothing
//! about which addresses the chain uses; the generator decides that.

use bitcoin::bip32::{ChildNumber, DerivationPath, Xpriv};
use bitcoin::{NetworkKind, ScriptBuf};

use crate::sign::{Key, ScriptKind, SECP};

/// BIP39 seed of "abandon abandon abandon abandon abandon abandon abandon
/// abandon abandon abandon abandon about" with an empty passphrase
/// (PBKDF2-HMAC-SHA512, 2048 rounds, salt "mnemonic"): a public test seed,
/// so any wallet can open the benchmark wallet from the mnemonic.
pub const TEST_MNEMONIC: &str =
    "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";
const TEST_SEED_HEX: &str = "5eb00bbddcf069084889a8ab9155568165f5c453ccb85e70811aaed6f6da5fc19a5ac40b389cd370d086206dec8aa6c43daea6690f20ad3d8d48b2d2ce9e38e4";

/// Account path of the wallet (BIP84, coin type 1 for test networks).
pub const ACCOUNT_PATH: &str = "m/84'/1'/0'";

/// Receive (0) or change (1) chain of the wallet.
pub const RECEIVE: u32 = 0;
pub const CHANGE: u32 = 1;

/// Derives the wallet's keys and describes it.
pub struct BigWallet {
    master: Xpriv,
    /// Extended keys of the receive and change chains.
    chains: [Xpriv; 2],
}

impl Default for BigWallet {
    fn default() -> Self {
        Self::new()
    }
}

impl BigWallet {
    pub fn new() -> BigWallet {
        let seed = hex::decode(TEST_SEED_HEX).expect("constant hex");
        let master = Xpriv::new_master(NetworkKind::Test, &seed).expect("64-byte seed is valid");
        let account_path: DerivationPath = ACCOUNT_PATH.parse().expect("constant path");
        let account = master
            .derive_priv(&SECP, &account_path)
            .expect("derivation cannot fail");
        let chain = |n| {
            account
                .derive_priv(
                    &SECP,
                    &[ChildNumber::from_normal_idx(n).expect("0 and 1 are normal")],
                )
                .expect("derivation cannot fail")
        };
        BigWallet {
            master,
            chains: [chain(RECEIVE), chain(CHANGE)],
        }
    }

    /// The key at m/84'/1'/0'/`chain`/`index`.
    ///
    /// # Panics
    /// When `chain` is not 0 or 1, or `index` is hardened (>= 2^31).
    pub fn key(&self, chain: u32, index: u32) -> Key {
        let child = ChildNumber::from_normal_idx(index).expect("wallet indexes are below 2^31");
        let xpriv = self.chains[chain as usize]
            .derive_priv(&SECP, &[child])
            .expect("derivation cannot fail");
        Key::from_secret(xpriv.private_key)
    }

    /// The P2WPKH script of m/84'/1'/0'/`chain`/`index`.
    pub fn script_pubkey(&self, chain: u32, index: u32) -> ScriptBuf {
        self.key(chain, index).script_pubkey(ScriptKind::P2wpkh)
    }

    /// Private output descriptor of `chain`, in the form Core's
    /// `listdescriptors true` prints and `importdescriptors` accepts:
    /// `wpkh(tprv<master>/84h/1h/0h/<chain>/*)#<checksum>`.
    pub fn descriptor(&self, chain: u32) -> String {
        with_checksum(&format!("wpkh({}/84h/1h/0h/{chain}/*)", self.master))
    }
}

/// Appends the BIP380 descriptor checksum (`#` and 8 characters).
///
/// # Panics
/// When `descriptor` holds a character outside the descriptor charset
/// (never for the descriptors built here).
pub fn with_checksum(descriptor: &str) -> String {
    const INPUT_CHARSET: &str =
        "0123456789()[],'/*abcdefgh@:$%{}IJKLMNOPQRSTUVWXYZ&+-.;<=>?!^_|~ijklmnopqrstuvwxyzABCDEFGH`#\"\\ ";
    const CHECKSUM_CHARSET: &[u8] = b"qpzry9x8gf2tvdw0s3jn54khce6mua7l";
    const GENERATOR: [u64; 5] = [
        0xf5dee51989,
        0xa9fdca3312,
        0x1bab10e32d,
        0x3706b1677a,
        0x644d626ffd,
    ];

    fn polymod(chk: u64, value: u64) -> u64 {
        let top = chk >> 35;
        let mut chk = ((chk & 0x7ffffffff) << 5) ^ value;
        for (i, g) in GENERATOR.iter().enumerate() {
            if (top >> i) & 1 == 1 {
                chk ^= g;
            }
        }
        chk
    }

    let mut chk = 1u64;
    let mut groups = Vec::with_capacity(3);
    for c in descriptor.chars() {
        let v = INPUT_CHARSET
            .find(c)
            .expect("descriptor characters are in the BIP380 charset") as u64;
        chk = polymod(chk, v & 31);
        groups.push(v >> 5);
        if groups.len() == 3 {
            chk = polymod(chk, groups[0] * 9 + groups[1] * 3 + groups[2]);
            groups.clear();
        }
    }
    match groups.len() {
        1 => chk = polymod(chk, groups[0]),
        2 => chk = polymod(chk, groups[0] * 3 + groups[1]),
        _ => {}
    }
    for _ in 0..8 {
        chk = polymod(chk, 0);
    }
    chk ^= 1;
    let checksum: String = (0..8)
        .map(|i| CHECKSUM_CHARSET[((chk >> (5 * (7 - i))) & 31) as usize] as char)
        .collect();
    format!("{descriptor}#{checksum}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::{Address, Network};

    #[test]
    fn derives_the_bip84_test_vectors() {
        let wallet = BigWallet::new();
        // Well-known first addresses of the "abandon ... about" BIP84 testnet
        // account (the same keys show on regtest with the bcrt prefix).
        let first =
            Address::from_script(&wallet.script_pubkey(RECEIVE, 0), Network::Testnet).unwrap();
        assert_eq!(
            first.to_string(),
            "tb1q6rz28mcfaxtmd6v789l9rrlrusdprr9pqcpvkl"
        );
        let change =
            Address::from_script(&wallet.script_pubkey(CHANGE, 0), Network::Testnet).unwrap();
        assert_eq!(
            change.to_string(),
            "tb1q9u62588spffmq4dzjxsr5l297znf3z6j5p2688"
        );
    }

    #[test]
    fn descriptor_checksums_match_bip380() {
        assert_eq!(with_checksum("raw(deadbeef)"), "raw(deadbeef)#89f8spxm");
        let desc = BigWallet::new().descriptor(RECEIVE);
        assert!(desc.starts_with("wpkh(tprv8ZgxMBicQKsPe5YMU9gHen4Ez3ApihUfykaqUorj9t6FDqy3nP6eoXiAo2ssvpAjoLroQxHqr3R5nE3a5dU3DHTjTgJDd7zrbniJr6nrCzd/84h/1h/0h/0/*)#"), "{desc}");
    }
}
