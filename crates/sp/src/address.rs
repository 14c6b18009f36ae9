//! Silent-payment addresses (BIP-352 "Address encoding"): bech32m of the
//! version character `q` and `ser_P(B_scan) || ser_P(B_m)`.

use bitcoin::bech32::primitives::iter::{ByteIterExt, Fe32IterExt};
use bitcoin::bech32::{Bech32m, Fe32, Hrp};
use bitcoin::secp256k1::PublicKey;
use bitcoin::Network;

/// The human-readable part: "sp" for mainnet, "tsp" for testnets (BIP-352);
/// "sprt" on regtest, which the BIP does not name but drongo (Sparrow's
/// library) and spdk use, and Sparrow finds a subscription by the exact
/// string.
fn hrp(network: Network) -> Hrp {
    let text = match network {
        Network::Bitcoin => "sp",
        Network::Testnet | Network::Testnet4 | Network::Signet => "tsp",
        Network::Regtest => "sprt",
    };
    // Three fixed ASCII strings of at most four characters.
    Hrp::parse_unchecked(text)
}

/// The version-0 address of `(B_scan, B_m)`: `B_m` is `B_spend` for the
/// unlabelled address, `B_spend + label_m·G` for label `m`.
///
/// Built from the character iterator rather than `bech32::segwit`, whose
/// 90-character limit a 117-character silent-payment address exceeds
/// (BIP-352 suggests a 1023-character limit).
pub fn address(
    scan_public_key: &PublicKey,
    spend_public_key: &PublicKey,
    network: Network,
) -> String {
    let hrp = hrp(network);
    let mut data = [0u8; 66];
    data[..33].copy_from_slice(&scan_public_key.serialize());
    data[33..].copy_from_slice(&spend_public_key.serialize());
    data.iter()
        .copied()
        .bytes_to_fes()
        .with_checksum::<Bech32m>(&hrp)
        .with_witness_version(Fe32::Q)
        .chars()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::bech32::primitives::decode::CheckedHrpstring;

    #[test]
    fn prefixes_per_network() {
        let key: PublicKey = "0220bcfac5b99e04ad1a06ddfb016ee13582609d60b6291e98d01a9bc9a16c96d4"
            .parse()
            .unwrap();
        for (network, prefix) in [
            (Network::Bitcoin, "sp1q"),
            (Network::Testnet, "tsp1q"),
            (Network::Testnet4, "tsp1q"),
            (Network::Signet, "tsp1q"),
            (Network::Regtest, "sprt1q"),
        ] {
            let text = address(&key, &key, network);
            assert!(text.starts_with(prefix), "{text}");
            // hrp, "1", "q", 106 data characters, 6 checksum characters.
            assert_eq!(text.len(), prefix.len() + 106 + 6);
            let mut decoded = CheckedHrpstring::new::<Bech32m>(&text).unwrap();
            assert_eq!(decoded.hrp().as_str(), &prefix[..prefix.len() - 2]);
            assert_eq!(decoded.remove_witness_version(), Some(Fe32::Q));
            let data: Vec<u8> = decoded.byte_iter().collect();
            assert_eq!(data, [key.serialize(), key.serialize()].concat());
        }
    }
}
