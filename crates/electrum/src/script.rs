//! How a request names a script: by its hash (`blockchain.scripthash.*`,
//! up to 1.6) or by the script itself (`blockchain.scriptpubkey.*`, 1.7),
//! and the method its status notifications then carry. Apart from the
//! method table (`request`) so that the session's state and the silent
//! payments' parameters, which `request` uses, can name scripts without
//! depending on it.

use osprey_core::ScriptHash;

/// Method names that also name a script's status notifications.
pub const SCRIPTHASH_SUBSCRIBE: &str = "blockchain.scripthash.subscribe";
pub const SCRIPTPUBKEY_SUBSCRIBE: &str = "blockchain.scriptpubkey.subscribe";

/// How a client named a script: by script hash (up to 1.6), or by the
/// script itself (`blockchain.scriptpubkey.*`, 1.7). The form picks the
/// notification's method; either notification names the script by its hash.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ScriptForm {
    ScriptHash,
    ScriptPubKey,
}

/// A script as named in a request, with its hash (sha256(scriptPubKey)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptKey {
    pub scripthash: ScriptHash,
    pub form: ScriptForm,
}

impl ScriptKey {
    /// The method of this script's status notifications.
    pub fn notification_method(&self) -> &'static str {
        match self.form {
            ScriptForm::ScriptHash => SCRIPTHASH_SUBSCRIBE,
            ScriptForm::ScriptPubKey => SCRIPTPUBKEY_SUBSCRIBE,
        }
    }
}
