//! A deterministic test wallet: holds keys of every script kind plus the
//! harness's mining key, follows the node's chain to learn its coins, and
//! builds real signed transactions (signing is `osprey_chaingen::sign`, the
//! code that signs generated chains). It follows a [`ChainFeed`] as well.
//! Broadcasting is left to the caller ([`crate::Node::send_raw_transaction`]),
//! so tests can also put the transactions in blocks of their own.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::{bail, ensure, Context, Result};
use bitcoin::absolute::LockTime;
use bitcoin::transaction::Version;
use bitcoin::{
    Address, Amount, BlockHash, Network, OutPoint, Script, ScriptBuf, Sequence, Transaction, TxIn,
    TxOut, Txid, Witness,
};
use osprey_chaingen::params::COINBASE_MATURITY;
use osprey_chaingen::sign::{sign_transaction, vsize_max, Key, ScriptKind, Spend};
use serde_json::{json, Value};

use crate::feed::ChainFeed;
use crate::node::{mining_key, Node};

/// Change below this is left to the fee instead (above every dust limit).
const CHANGE_MIN_SATS: u64 = 1_000;

/// Key family of test wallet keys (distinct from chaingen's seeds).
const WALLET_KEY_SEED: u64 = 0x7e57_3a11e7;

/// A coin the wallet can spend.
#[derive(Clone, Debug)]
pub struct WalletCoin {
    pub outpoint: OutPoint,
    pub spend: Spend,
    /// Confirmation height; `None` while only in the mempool.
    pub height: Option<u32>,
    pub coinbase: bool,
}

impl AsRef<Spend> for WalletCoin {
    fn as_ref(&self) -> &Spend {
        &self.spend
    }
}

/// Keys, coins and transaction building for tests. A clone is a second
/// wallet of the same keys and coins: what it spends, the first can spend
/// too (a conflicting transaction, for a reorg's other branch).
#[derive(Clone)]
pub struct TestWallet {
    next_key: u64,
    /// Every script the wallet can spend, with its key and kind.
    scripts: HashMap<ScriptBuf, (Key, ScriptKind)>,
    /// The first key of each kind, for [`TestWallet::script_pubkey`].
    defaults: HashMap<ScriptKind, Key>,
    /// Coins from scanned blocks only.
    confirmed: BTreeMap<OutPoint, WalletCoin>,
    /// Txids of scanned transactions that touched the wallet.
    confirmed_txids: HashSet<Txid>,
    /// `confirmed` after the pending transactions: what the wallet holds.
    coins: BTreeMap<OutPoint, WalletCoin>,
    /// Hashes of the blocks scanned, by height.
    scanned: Vec<BlockHash>,
    /// Transactions built but not seen in a block yet, oldest first.
    pending: Vec<Transaction>,
    segwit_height: u32,
    /// Fee rate of built transactions, sat/vB.
    pub fee_rate: u64,
}

impl Default for TestWallet {
    fn default() -> Self {
        Self::new()
    }
}

impl TestWallet {
    /// A wallet with the mining key and one key of each kind.
    pub fn new() -> TestWallet {
        let mut wallet = TestWallet {
            next_key: 0,
            scripts: HashMap::new(),
            defaults: HashMap::new(),
            confirmed: BTreeMap::new(),
            confirmed_txids: HashSet::new(),
            coins: BTreeMap::new(),
            scanned: Vec::new(),
            pending: Vec::new(),
            segwit_height: osprey_chaingen::params::SEGWIT_HEIGHT,
            fee_rate: 2,
        };
        let miner = mining_key();
        wallet.scripts.insert(
            miner.script_pubkey(ScriptKind::P2pkh),
            (miner, ScriptKind::P2pkh),
        );
        for kind in ScriptKind::ALL {
            let key = wallet.next_key();
            wallet.scripts.insert(key.script_pubkey(kind), (key, kind));
            wallet.defaults.insert(kind, key);
        }
        wallet
    }

    fn next_key(&mut self) -> Key {
        self.next_key += 1;
        Key::from_seed(WALLET_KEY_SEED, self.next_key)
    }

    /// The wallet's standing script of `kind`.
    pub fn script_pubkey(&self, kind: ScriptKind) -> ScriptBuf {
        self.defaults[&kind].script_pubkey(kind)
    }

    /// The regtest address of [`TestWallet::script_pubkey`].
    pub fn address(&self, kind: ScriptKind) -> Address {
        self.defaults[&kind].address(kind, Network::Regtest)
    }

    /// A never used script of `kind` that the wallet can spend.
    pub fn new_script(&mut self, kind: ScriptKind) -> ScriptBuf {
        let key = self.next_key();
        let script = key.script_pubkey(kind);
        self.scripts.insert(script.clone(), (key, kind));
        script
    }

    /// Every coin the wallet knows, confirmed or not, by outpoint.
    pub fn coins(&self) -> impl Iterator<Item = &WalletCoin> {
        self.coins.values()
    }

    /// The coin paying `script` in transaction `txid`.
    ///
    /// # Panics
    /// If the wallet knows no such coin (a test's mistake).
    pub fn coin_paying(&self, txid: Txid, script: &Script) -> OutPoint {
        self.coins()
            .find(|c| c.outpoint.txid == txid && c.spend.txout.script_pubkey == *script)
            .unwrap_or_else(|| panic!("no coin of {script:x} in {txid}"))
            .outpoint
    }

    /// Sum of all known coins.
    pub fn balance(&self) -> Amount {
        Amount::from_sat(
            self.coins
                .values()
                .map(|c| c.spend.txout.value.to_sat())
                .sum(),
        )
    }

    /// Height of the last block scanned.
    pub fn height(&self) -> Option<u32> {
        self.scanned.len().checked_sub(1).map(|h| h as u32)
    }

    /// Scans the node's chain for the wallet's coins: new blocks only, or
    /// everything again after a reorg. Transactions the wallet built that no
    /// block holds yet stay pending (their outputs are unconfirmed coins)
    /// unless a block spent one of their inputs otherwise.
    ///
    /// # Errors
    /// On RPC failures.
    pub fn sync(&mut self, node: &dyn Node) -> Result<()> {
        self.segwit_height = node.segwit_height();
        let (tip, _) = node.tip()?;
        if let Some(last) = self.height() {
            if last > tip || node.block_hash(last)? != self.scanned[last as usize] {
                self.start_over();
            }
        }
        let from = self.scanned.len() as u32;
        for chunk in (from..=tip).collect::<Vec<_>>().chunks(100) {
            let params: Vec<Vec<Value>> = chunk.iter().map(|h| vec![json!(h)]).collect();
            let hashes = node.rpc().call_batch("getblockhash", &params)?;
            let hashes: Vec<String> = hashes
                .into_iter()
                .map(|r| {
                    Ok(r?
                        .as_str()
                        .context("getblockhash answer is not a string")?
                        .to_string())
                })
                .collect::<Result<_>>()?;
            // Verbosity 0 (an integer, as btcd requires): the raw block.
            let params: Vec<Vec<Value>> = hashes.iter().map(|h| vec![json!(h), json!(0)]).collect();
            let blocks = node.rpc().call_batch("getblock", &params)?;
            for (height, raw) in chunk.iter().zip(blocks) {
                let raw = raw?;
                let hex = raw.as_str().context("getblock answer is not hex")?;
                let block: bitcoin::Block = bitcoin::consensus::deserialize(&hex::decode(hex)?)?;
                self.scan(*height, &block);
            }
        }
        self.settle_pending();
        Ok(())
    }

    /// [`TestWallet::sync`] on a [`ChainFeed`]'s best chain instead of a
    /// node's. The feed checks no script, so coins of every kind count as
    /// spendable whatever the height.
    pub fn sync_feed(&mut self, feed: &ChainFeed) {
        self.segwit_height = 0;
        let best = feed.hashes();
        if let Some(last) = self.height() {
            if best.get(last as usize) != Some(&self.scanned[last as usize]) {
                self.start_over();
            }
        }
        for height in self.scanned.len() as u32..best.len() as u32 {
            let block = feed
                .block(osprey_core::Height(height))
                .expect("a block of the best chain");
            self.scan(height, &block);
        }
        self.settle_pending();
    }

    /// Forgets a transaction it built that no block holds: its inputs are
    /// coins again and its outputs are not, so that a replacement can
    /// spend them.
    ///
    /// # Errors
    /// When no such transaction is pending.
    pub fn abandon(&mut self, txid: Txid) -> Result<()> {
        let before = self.pending.len();
        self.pending.retain(|tx| tx.compute_txid() != txid);
        ensure!(self.pending.len() < before, "{txid} is not pending");
        self.settle_pending();
        Ok(())
    }

    /// A reorg: scans from genesis again (simple and fast enough for test
    /// chains).
    fn start_over(&mut self) {
        self.scanned.clear();
        self.confirmed.clear();
        self.confirmed_txids.clear();
    }

    fn scan(&mut self, height: u32, block: &bitcoin::Block) {
        for tx in &block.txdata {
            if apply(&self.scripts, &mut self.confirmed, tx, Some(height)) {
                self.confirmed_txids.insert(tx.compute_txid());
            }
        }
        self.scanned.push(block.block_hash());
    }

    /// The coins: the confirmed ones after the pending transactions that
    /// can still confirm.
    fn settle_pending(&mut self) {
        self.coins = self.confirmed.clone();
        for tx in std::mem::take(&mut self.pending) {
            if self.confirmed_txids.contains(&tx.compute_txid()) {
                continue;
            }
            // An input gone means a block spent it otherwise: the
            // transaction can never confirm.
            if tx
                .input
                .iter()
                .all(|i| self.coins.contains_key(&i.previous_output))
            {
                apply(&self.scripts, &mut self.coins, &tx, None);
                self.pending.push(tx);
            }
        }
    }

    /// Coins a transaction for the next block may spend: mature, and only
    /// witness kinds once segwit rules apply to the next block.
    fn spendable(&self) -> Vec<WalletCoin> {
        let next_height = self.scanned.len() as u32;
        let segwit = next_height >= self.segwit_height;
        let mut coins: Vec<WalletCoin> = self
            .coins
            .values()
            .filter(|c| {
                !c.coinbase
                    || c.height
                        .is_some_and(|h| next_height.saturating_sub(h) >= COINBASE_MATURITY)
            })
            .filter(|c| segwit || !c.spend.kind.needs_witness())
            .cloned()
            .collect();
        // Largest first, then by outpoint, so selection is deterministic.
        coins.sort_by(|a, b| {
            b.spend
                .txout
                .value
                .cmp(&a.spend.txout.value)
                .then(a.outpoint.cmp(&b.outpoint))
        });
        coins
    }

    /// Builds and signs a transaction paying `to` `amount`, change back to
    /// the wallet. The wallet treats it as sent (its coins are spent, its
    /// change is an unconfirmed coin), so the next call can chain on it.
    ///
    /// # Errors
    /// When the spendable coins cannot pay amount and fee.
    pub fn send(&mut self, to: ScriptBuf, amount: Amount) -> Result<Transaction> {
        self.send_many(&[(to, amount)])
    }

    /// Like [`TestWallet::send`] with several outputs.
    ///
    /// # Errors
    /// When the spendable coins cannot pay the outputs and fee.
    pub fn send_many(&mut self, outputs: &[(ScriptBuf, Amount)]) -> Result<Transaction> {
        let wanted: u64 = outputs.iter().map(|(_, a)| a.to_sat()).sum();
        let mut selected = Vec::new();
        let mut total = 0;
        for coin in self.spendable() {
            total += coin.spend.txout.value.to_sat();
            selected.push(coin);
            if total >= wanted + self.fee(&selected, outputs, true) {
                return self
                    .build(selected, outputs, |_, _| Ok(()))
                    .map(|(tx, ())| tx);
            }
        }
        bail!(
            "wallet cannot pay {wanted} sats plus fee: {total} sats spendable at height {:?} (coinbases need {COINBASE_MATURITY} confirmations)",
            self.height()
        )
    }

    /// Builds and signs a transaction spending exactly `outpoints` (coins
    /// of this wallet, confirmed or not) to `outputs`, change back to the
    /// wallet.
    ///
    /// # Errors
    /// When an outpoint is not the wallet's or the coins cannot pay.
    pub fn spend(
        &mut self,
        outpoints: &[OutPoint],
        outputs: &[(ScriptBuf, Amount)],
    ) -> Result<Transaction> {
        self.spend_shaped(outpoints, outputs, |_, _| Ok(()))
            .map(|(tx, ())| tx)
    }

    /// Like [`TestWallet::spend`], but `shape` may rewrite the scripts of
    /// `outputs` (the first outputs of the transaction, in order; keeping
    /// their lengths keeps the fee right) before it is signed, given the
    /// unsigned transaction and the coins it spends: for outputs whose keys
    /// depend on the inputs, as silent payments' do. Returns the signed
    /// transaction and what `shape` returned.
    ///
    /// # Errors
    /// As [`TestWallet::spend`], or `shape`'s error.
    pub fn spend_shaped<T>(
        &mut self,
        outpoints: &[OutPoint],
        outputs: &[(ScriptBuf, Amount)],
        shape: impl FnOnce(&mut Transaction, &[WalletCoin]) -> Result<T>,
    ) -> Result<(Transaction, T)> {
        let selected = outpoints
            .iter()
            .map(|o| {
                self.coins
                    .get(o)
                    .cloned()
                    .with_context(|| format!("{o} is not a coin of this wallet"))
            })
            .collect::<Result<Vec<_>>>()?;
        self.build(selected, outputs, shape)
    }

    fn fee(&self, inputs: &[WalletCoin], outputs: &[(ScriptBuf, Amount)], change: bool) -> u64 {
        let kinds: Vec<ScriptKind> = inputs.iter().map(|c| c.spend.kind).collect();
        let lens = outputs
            .iter()
            .map(|(s, _)| s.len())
            .chain(change.then_some(34));
        self.fee_rate * vsize_max(&kinds, lens)
    }

    fn build<T>(
        &mut self,
        inputs: Vec<WalletCoin>,
        outputs: &[(ScriptBuf, Amount)],
        shape: impl FnOnce(&mut Transaction, &[WalletCoin]) -> Result<T>,
    ) -> Result<(Transaction, T)> {
        ensure!(!inputs.is_empty(), "a transaction needs at least one input");
        let total: u64 = inputs.iter().map(|c| c.spend.txout.value.to_sat()).sum();
        let wanted: u64 = outputs.iter().map(|(_, a)| a.to_sat()).sum();
        let mut txouts: Vec<TxOut> = outputs
            .iter()
            .map(|(script, value)| TxOut {
                value: *value,
                script_pubkey: script.clone(),
            })
            .collect();
        let with_change = self.fee(&inputs, outputs, true);
        if total >= wanted + with_change + CHANGE_MIN_SATS {
            let segwit = self.scanned.len() as u32 >= self.segwit_height;
            let kind = if segwit {
                ScriptKind::P2wpkh
            } else {
                ScriptKind::P2pkh
            };
            let change = self.new_script(kind);
            txouts.push(TxOut {
                value: Amount::from_sat(total - wanted - with_change),
                script_pubkey: change,
            });
        } else if total < wanted + self.fee(&inputs, outputs, false) {
            bail!("inputs hold {total} sats, outputs want {wanted} plus fee");
        }
        let mut tx = Transaction {
            version: Version::TWO,
            lock_time: LockTime::ZERO,
            input: inputs
                .iter()
                .map(|c| TxIn {
                    previous_output: c.outpoint,
                    script_sig: ScriptBuf::new(),
                    sequence: Sequence::ENABLE_RBF_NO_LOCKTIME,
                    witness: Witness::new(),
                })
                .collect(),
            output: txouts,
        };
        let shaped = shape(&mut tx, &inputs)?;
        sign_transaction(&mut tx, &inputs)?;
        apply(&self.scripts, &mut self.coins, &tx, None);
        self.pending.push(tx.clone());
        Ok((tx, shaped))
    }
}

/// Records `tx` in `coins`: its inputs are spent, its outputs to `scripts`
/// are coins. Returns whether it touched the wallet.
fn apply(
    scripts: &HashMap<ScriptBuf, (Key, ScriptKind)>,
    coins: &mut BTreeMap<OutPoint, WalletCoin>,
    tx: &Transaction,
    height: Option<u32>,
) -> bool {
    let txid = tx.compute_txid();
    let mut touched = false;
    if !tx.is_coinbase() {
        for input in &tx.input {
            touched |= coins.remove(&input.previous_output).is_some();
        }
    }
    for (vout, txout) in tx.output.iter().enumerate() {
        if let Some((key, kind)) = scripts.get(&txout.script_pubkey) {
            let outpoint = OutPoint {
                txid,
                vout: vout as u32,
            };
            let spend = Spend {
                txout: txout.clone(),
                holder: (*key).into(),
                kind: *kind,
            };
            coins.insert(
                outpoint,
                WalletCoin {
                    outpoint,
                    spend,
                    height,
                    coinbase: tx.is_coinbase(),
                },
            );
            touched = true;
        }
    }
    touched
}
