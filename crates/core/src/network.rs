//! Network parameters: names, default ports and the data-directory layout of
//! the node, for every network Osprey serves.

use std::fmt;
use std::str::FromStr;

/// A Bitcoin network Osprey can index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    Bitcoin,
    Testnet,
    Testnet4,
    Signet,
    Regtest,
}

impl Network {
    pub const ALL: [Network; 5] = [
        Network::Bitcoin,
        Network::Testnet,
        Network::Testnet4,
        Network::Signet,
        Network::Regtest,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Network::Bitcoin => "bitcoin",
            Network::Testnet => "testnet",
            Network::Testnet4 => "testnet4",
            Network::Signet => "signet",
            Network::Regtest => "regtest",
        }
    }

    /// The rust-bitcoin network, for addresses, magic and genesis.
    pub fn bitcoin(self) -> bitcoin::Network {
        match self {
            Network::Bitcoin => bitcoin::Network::Bitcoin,
            Network::Testnet => bitcoin::Network::Testnet,
            Network::Testnet4 => bitcoin::Network::Testnet4,
            Network::Signet => bitcoin::Network::Signet,
            Network::Regtest => bitcoin::Network::Regtest,
        }
    }

    /// Bitcoin Core's default JSON-RPC port.
    pub fn default_daemon_rpc_port(self) -> u16 {
        match self {
            Network::Bitcoin => 8332,
            Network::Testnet => 18332,
            Network::Testnet4 => 48332,
            Network::Signet => 38332,
            Network::Regtest => 18443,
        }
    }

    /// Electrum's customary TCP port for the network (electrs uses the same).
    pub fn default_electrum_port(self) -> u16 {
        match self {
            Network::Bitcoin => 50001,
            Network::Testnet => 60001,
            Network::Testnet4 => 40001,
            Network::Signet => 60601,
            Network::Regtest => 60401,
        }
    }

    /// The sub-directory Bitcoin Core uses for this network inside its data
    /// directory (where `.cookie` and `blocks/` live); mainnet has none.
    pub fn daemon_subdir(self) -> Option<&'static str> {
        match self {
            Network::Bitcoin => None,
            Network::Testnet => Some("testnet3"),
            Network::Testnet4 => Some("testnet4"),
            Network::Signet => Some("signet"),
            Network::Regtest => Some("regtest"),
        }
    }

    /// The genesis block hash, to check that the node serves this network.
    pub fn genesis_hash(self) -> bitcoin::BlockHash {
        bitcoin::constants::genesis_block(self.bitcoin()).block_hash()
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Network {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bitcoin" | "mainnet" | "main" => Ok(Network::Bitcoin),
            "testnet" | "testnet3" | "test" => Ok(Network::Testnet),
            "testnet4" => Ok(Network::Testnet4),
            "signet" => Ok(Network::Signet),
            "regtest" => Ok(Network::Regtest),
            other => Err(format!(
                "unknown network {other:?} (expected bitcoin, testnet, testnet4, signet or regtest)"
            )),
        }
    }
}
