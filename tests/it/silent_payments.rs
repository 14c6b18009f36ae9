//! Silent payments end to end with the real binary, `--silent-payments`:
//!
//! - on btcd, a chaingen chain with silent payments: each of the manifest's
//!   receivers subscribes from height 0 as Sparrow does (positional, its
//!   labels), and the notifications up to progress 1.0 list exactly the
//!   manifest's payments with their heights and tweaks; the subscription
//!   each repeats is the one answered;
//! - on Bitcoin Core, with spdk as the sending wallet and as the receiver
//!   that checks the tweaks (docs/silent-payments.md, 4.4): payments seen
//!   in the mempool, then confirmed, then moved by a reorg.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::time::Duration;

use bitcoin::hashes::Hash;
use bitcoin::key::TweakedPublicKey;
use bitcoin::secp256k1::{PublicKey, XOnlyPublicKey};
use bitcoin::{Address, Amount, BlockHash, OutPoint, ScriptBuf, Transaction, TxOut};
use osprey_chaingen::sign::Key;
use osprey_chaingen::silent::{pay_spends, Receiver};
use osprey_testenv::{BitcoindNode, BitcoindOptions, Node, ScriptKind, TestWallet, WalletCoin};
use serde_json::{json, Value};
use silentpayments::receiving::{Label, Receiver as SpdkReceiver};
use silentpayments::utils::receiving::{
    calculate_ecdh_shared_secret, calculate_tweak_data, get_pubkey_from_input,
};
use silentpayments::{SilentPaymentKeyMaterial, SpVersion};

use crate::common::command::{generate_sp_chain, submit_chain};
use crate::common::{scripthash, seed, start_btcd, Osprey, OspreyConfig, Session};

/// How long a whole historical scan of the small chain may take. Scans
/// take only idle CPU (`crates/server/src/scan_threads.rs`): while the
/// tests beside this one keep both cores busy, a scan of milliseconds
/// waits seconds.
const SCAN_TIMEOUT: Duration = Duration::from_secs(300);

#[test]
fn subscriptions_report_the_manifests_payments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (chain, _, receivers) = generate_sp_chain(dir.path(), "11", "0.3");
    let paid: usize = receivers.iter().map(|r| r.payments.len()).sum();
    assert!(paid > 0, "the chain pays some receiver");
    let node = start_btcd();
    submit_chain(dir.path(), &chain, &node);
    let osprey = Osprey::start(
        &node,
        &dir.path().join("db"),
        OspreyConfig::with_args(&["--silent-payments"]),
    );
    let mut session = osprey.session();
    let features = session.call("server.features", json!([]));
    assert_eq!(features["silent_payments"], json!([0]));
    for receiver in &receivers {
        let subscription = session.call(
            SP_METHOD,
            json!([
                receiver.scan_private_key,
                receiver.spend_public_key,
                0,
                receiver.labels,
            ]),
        );
        assert_eq!(subscription["address"], receiver.address);
        assert_eq!(subscription["start_height"], 0);
        let found = scan_to_end(&mut session, std::slice::from_ref(&subscription)).remove(0);
        let expected: BTreeSet<Entry> = receiver
            .payments
            .iter()
            .map(|p| (u64::from(p.height), p.txid.clone(), p.tweak_key.clone()))
            .collect();
        assert_eq!(found, expected, "{}", receiver.address);
    }
}

fn entry_of(entry: &Value) -> (u64, String, String) {
    let text = |key: &str| entry[key].as_str().expect(key).to_string();
    (
        entry["height"].as_u64().expect("height"),
        text("tx_hash"),
        text("tweak_key"),
    )
}

/// Key family of the Core test's two receivers (apart from every other
/// family of test keys).
const RECEIVER_KEY_SEED: u64 = 0x5e51_11e7;

/// Key family of the decoys' random taproot keys (its index is the test's
/// seed).
const DECOY_KEY_SEED: u64 = 0xdec0_0004;

/// What each funding output holds.
const FUNDING_SATS: u64 = 1_000_000;

/// How long a server may take to notify a change (its silent-payment
/// notifications wait for idle CPU, as `SCAN_TIMEOUT` says).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) const SP_METHOD: &str = "blockchain.silentpayments.subscribe";
const HEADERS_METHOD: &str = "blockchain.headers.subscribe";
const SCRIPTHASH_METHOD: &str = "blockchain.scripthash.subscribe";

/// One receiver of the Core test: its keys, the labels it subscribes with
/// (besides the change label, always scanned), and spdk's receiver for them.
struct Payee {
    scan: Key,
    receiver: Receiver,
    subscribed: Vec<u32>,
    spdk: SpdkReceiver,
}

impl Payee {
    /// Receiver `index` of [`RECEIVER_KEY_SEED`], paid through its
    /// unlabelled address and `paid` labels, subscribing with `subscribed`.
    fn new(index: u64, paid: &[u32], subscribed: &[u32]) -> Payee {
        let scan = Key::from_seed(RECEIVER_KEY_SEED, 2 * index);
        let spend = Key::from_seed(RECEIVER_KEY_SEED, 2 * index + 1);
        let mut spdk = SpdkReceiver::new(
            SpVersion::ZERO,
            *scan.public_key(),
            *spend.public_key(),
            Label::new(*scan.secret_key(), 0),
            silentpayments::Network::Regtest,
        )
        .expect("a valid receiver");
        for &m in subscribed {
            spdk.add_label(Label::new(*scan.secret_key(), m))
                .expect("a valid label");
        }
        Payee {
            scan,
            receiver: Receiver::with_keys(scan, spend, paid),
            subscribed: subscribed.to_vec(),
            spdk,
        }
    }

    /// The subscribe's parameters, positional, as Sparrow sends them.
    fn subscribe_params(&self, start: u32) -> Value {
        json!([
            hex::encode(self.scan.secret_key().secret_bytes()),
            self.receiver.spend_public_key().to_string(),
            start,
            self.subscribed,
        ])
    }

    /// The label `m` of a label spdk found, among those scanned.
    fn label_of(&self, found: &Label) -> u32 {
        std::iter::once(0)
            .chain(self.subscribed.iter().copied())
            .find(|m| Label::new(*self.scan.secret_key(), *m) == *found)
            .expect("spdk finds only the labels it was given")
    }
}

/// Where one output of a test transaction goes.
enum To {
    /// Payee `.0`, unlabelled (`None`) or through label `.1`.
    Silent(usize, Option<u32>),
    Plain(ScriptBuf),
}

/// A test transaction as sent.
struct Sent {
    tx: Transaction,
    /// `ser_P(input_hash·A)` as spdk's sender made it; `None` when it pays
    /// no silent payment.
    tweak_key: Option<String>,
    /// Its silent outputs: vout, payee, label, sats.
    silent: Vec<(u32, usize, Option<u32>, u64)>,
}

/// One history entry: height, txid, tweak key.
pub(crate) type Entry = (u64, String, String);

/// The outputs of one transaction paid to a receiver through a label it
/// scans: sats and label (`None`: unlabelled) by vout.
type Paid = BTreeMap<u32, (u64, Option<u32>)>;

/// The test's sending wallet: its keys, its unspent funding coins, and
/// the payees it pays.
struct Sender<'a> {
    wallet: TestWallet,
    coins: Vec<WalletCoin>,
    payees: &'a [Payee],
}

impl Sender<'_> {
    /// Pays `outputs` from funding coins of `kinds` (each spent once), the
    /// silent outputs' keys made by spdk's sender for the inputs as signed.
    fn pay(&mut self, kinds: &[ScriptKind], outputs: Vec<(To, u64)>) -> Sent {
        let outpoints: Vec<OutPoint> = kinds
            .iter()
            .map(|kind| {
                let i = self
                    .coins
                    .iter()
                    .position(|c| c.spend.kind == *kind)
                    .unwrap_or_else(|| panic!("no {kind} coin left"));
                self.coins.swap_remove(i).outpoint
            })
            .collect();
        self.pay_from(&outpoints, outputs)
    }

    /// Pays `outputs` from the wallet's coins at `outpoints`.
    fn pay_from(&mut self, outpoints: &[OutPoint], outputs: Vec<(To, u64)>) -> Sent {
        // A silent output's place is held by a taproot script of the same
        // length until spdk gives its key.
        let placeholder = Key::from_seed(DECOY_KEY_SEED, 0).script_pubkey(ScriptKind::P2tr);
        let scripts: Vec<(ScriptBuf, Amount)> = outputs
            .iter()
            .map(|(to, sats)| {
                let script = match to {
                    To::Silent(..) => placeholder.clone(),
                    To::Plain(script) => script.clone(),
                };
                (script, Amount::from_sat(*sats))
            })
            .collect();
        let silent: Vec<(u32, usize, Option<u32>, u64)> = outputs
            .iter()
            .enumerate()
            .filter_map(|(vout, (to, sats))| match to {
                To::Silent(payee, label) => Some((vout as u32, *payee, *label, *sats)),
                To::Plain(_) => None,
            })
            .collect();
        let recipients: Vec<SilentPaymentKeyMaterial> = silent
            .iter()
            .map(|&(_, payee, label, _)| self.payees[payee].receiver.key_material(label))
            .collect();
        let (tx, tweak_key) = self
            .wallet
            .spend_shaped(outpoints, &scripts, |tx, spent| {
                if recipients.is_empty() {
                    return Ok(None);
                }
                let made = pay_spends(tx, spent, &recipients)?;
                for (&(vout, ..), (key, _k)) in silent.iter().zip(&made.outputs) {
                    tx.output[vout as usize].script_pubkey = ScriptBuf::new_p2tr_tweaked(
                        TweakedPublicKey::dangerous_assume_tweaked(*key),
                    );
                }
                Ok(Some(hex::encode(made.tweak_key)))
            })
            .expect("a payment from the wallet's coins");
        Sent {
            tx,
            tweak_key,
            silent,
        }
    }
}

/// Checks one silent-payments notification's shape and returns which
/// subscription it is (its index in `subscriptions`, whose object it must
/// repeat byte for byte), its progress and its entries.
fn read_notification(n: &Value, subscriptions: &[Value]) -> (usize, f64, Vec<Entry>) {
    let params = n["params"].as_array().expect("positional params");
    assert_eq!(params.len(), 3, "{n}");
    let which = subscriptions
        .iter()
        .position(|s| *s == params[0])
        .unwrap_or_else(|| panic!("a notification of no subscription: {n}"));
    let progress = params[1].as_f64().expect("progress");
    let entries = params[2]
        .as_array()
        .expect("history")
        .iter()
        .map(|entry| {
            let keys: BTreeSet<&str> = entry
                .as_object()
                .expect("entry")
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, BTreeSet::from(["height", "tweak_key", "tx_hash"]));
            let entry = entry_of(entry);
            assert_eq!(entry.2.len(), 66, "{n}");
            entry
        })
        .collect();
    (which, progress, entries)
}

/// Reads notifications until each of `subscriptions`' historical scans
/// ended (progress 1.0, then that once more with no entry), checking that
/// progress never goes back; returns what each listed.
pub(crate) fn scan_to_end(session: &mut Session, subscriptions: &[Value]) -> Vec<BTreeSet<Entry>> {
    let mut found = vec![BTreeSet::new(); subscriptions.len()];
    let mut progress = vec![0.0; subscriptions.len()];
    // The end comes twice: with the scan's last entries, then, a little
    // later, again with none (for Sparrow's threading); once both came, no
    // notification of the scan is left to arrive.
    let mut repeated = vec![false; subscriptions.len()];
    while repeated.iter().any(|r| !r) {
        let n = session.wait_notification(SP_METHOD, SCAN_TIMEOUT);
        let (which, p, entries) = read_notification(&n, subscriptions);
        if progress[which] == 1.0 {
            assert!(!repeated[which], "a third end of the scan: {n}");
            assert_eq!((p, entries.len()), (1.0, 0), "the end repeated, empty: {n}");
            repeated[which] = true;
            continue;
        }
        assert!(
            p >= progress[which],
            "progress {p} after {}",
            progress[which]
        );
        progress[which] = p;
        for entry in entries {
            assert!(found[which].insert(entry), "listed twice: {n}");
        }
    }
    found
}

/// Takes the silent-payment notifications already received (call it after
/// a sentinel notification the server sends after them): live updates,
/// progress 1.0, no entry twice. Returns what each subscription was sent.
fn take_received(session: &mut Session, subscriptions: &[Value]) -> Vec<BTreeSet<Entry>> {
    let mut found = vec![BTreeSet::new(); subscriptions.len()];
    while session
        .pending_notifications()
        .iter()
        .any(|n| n["method"] == SP_METHOD)
    {
        let n = session.wait_notification(SP_METHOD, NOTIFY_TIMEOUT);
        let (which, progress, entries) = read_notification(&n, subscriptions);
        assert_eq!(progress, 1.0, "{n}");
        assert!(!entries.is_empty(), "live updates carry news: {n}");
        for entry in entries {
            assert!(found[which].insert(entry), "sent twice: {n}");
        }
    }
    found
}

/// Waits for live notifications (progress 1.0) until each subscription
/// was sent exactly `expected`'s entries for it, each once, and nothing
/// else.
fn receive_exactly(session: &mut Session, subscriptions: &[Value], expected: &[BTreeSet<Entry>]) {
    let mut got = vec![BTreeSet::new(); expected.len()];
    while got != expected {
        let n = session.wait_notification(SP_METHOD, NOTIFY_TIMEOUT);
        let (which, progress, entries) = read_notification(&n, subscriptions);
        assert_eq!(progress, 1.0, "{n}");
        for entry in entries {
            assert!(expected[which].contains(&entry), "not expected: {n}");
            assert!(got[which].insert(entry), "sent twice: {n}");
        }
    }
}

/// Waits for the headers notification of the block `hash` at `height`
/// (older ones are skipped): the server sends it after the silent-payment
/// notifications of the same block (docs/silent-payments.md, 1.3 rule 7).
fn wait_tip(session: &mut Session, node: &dyn Node, height: u32, hash: BlockHash) {
    let header: String = node
        .rpc()
        .call("getblockheader", &[json!(hash.to_string()), json!(false)])
        .expect("getblockheader");
    loop {
        let n = session.wait_notification(HEADERS_METHOD, NOTIFY_TIMEOUT);
        if n["params"][0] == json!({"height": height, "hex": header}) {
            return;
        }
    }
}

/// Waits for the block `hash` at `height` to reach `session`, and asserts
/// that no silent-payment notification came before it: the block confirms
/// only payments the session was sent from the mempool, which are not sent
/// again (docs/silent-payments.md, 1.3 rule 5).
fn assert_block_brings_nothing(
    session: &mut Session,
    subscriptions: &[Value],
    node: &dyn Node,
    height: u32,
    hash: BlockHash,
) {
    wait_tip(session, node, height, hash);
    let again = take_received(session, subscriptions);
    assert!(
        again.iter().all(BTreeSet::is_empty),
        "payments sent from the mempool are not sent again when they confirm: {again:?}"
    );
}

/// A new session in which every payee subscribes from height 0: the
/// session, its subscriptions and what each historical scan listed.
fn subscribe_from_genesis(
    osprey: &Osprey,
    payees: &[Payee],
) -> (Session, Vec<Value>, Vec<BTreeSet<Entry>>) {
    let mut session = osprey.session();
    let subscriptions: Vec<Value> = payees
        .iter()
        .map(|payee| session.call(SP_METHOD, payee.subscribe_params(0)))
        .collect();
    let listed = scan_to_end(&mut session, &subscriptions);
    (session, subscriptions, listed)
}

/// Mines a block of exactly `txs` (in the node's mempool) paying its
/// coinbase to `to`; returns its hash.
fn mine_block(node: &dyn Node, to: &Address, txs: &[&Sent]) -> BlockHash {
    let txids: Vec<String> = txs
        .iter()
        .map(|s| s.tx.compute_txid().to_string())
        .collect();
    let mined: Value = node
        .rpc()
        .call("generateblock", &[json!(to.to_string()), json!(txids)])
        .expect("generateblock");
    BlockHash::from_str(mined["hash"].as_str().expect("a block hash")).expect("a block hash")
}

/// What each payee must be told of the payments sent, and what spdk must
/// find: by payee, by txid, the tweak key and the outputs paid through
/// the labels it scans.
struct Expected(Vec<BTreeMap<String, (String, Paid)>>);

impl Expected {
    fn new(sent: &[&Sent], payees: &[Payee]) -> Expected {
        let mut expected = vec![BTreeMap::new(); payees.len()];
        for s in sent {
            for &(vout, payee, label, sats) in &s.silent {
                let scanned = label.is_none_or(|m| m == 0 || payees[payee].subscribed.contains(&m));
                if !scanned {
                    continue;
                }
                let tweak = s.tweak_key.clone().expect("a silent payment's tweak");
                expected[payee]
                    .entry(s.tx.compute_txid().to_string())
                    .or_insert_with(|| (tweak, BTreeMap::new()))
                    .1
                    .insert(vout, (sats, label));
            }
        }
        Expected(expected)
    }

    /// The entries `payee` must be told, each at `height(txid)`.
    fn entries(&self, payee: usize, height: impl Fn(&str) -> u64) -> BTreeSet<Entry> {
        self.0[payee]
            .iter()
            .map(|(txid, (tweak, _))| (height(txid), txid.clone(), tweak.clone()))
            .collect()
    }

    /// Asserts that each payee was `told` exactly its entries at
    /// `height(txid)`, and that spdk agrees with each ([`check_with_spdk`]).
    fn assert_told(
        &self,
        session: &mut Session,
        told: &[BTreeSet<Entry>],
        height: impl Fn(&str) -> u64 + Copy,
        payees: &[Payee],
        prevouts: &BTreeMap<OutPoint, TxOut>,
    ) {
        for (payee, got) in told.iter().enumerate() {
            assert_eq!(
                *got,
                self.entries(payee, height),
                "{}",
                payees[payee].receiver.address()
            );
            for entry in got {
                check_with_spdk(
                    session,
                    entry,
                    &payees[payee],
                    prevouts,
                    &self.0[payee][&entry.1].1,
                );
            }
        }
    }
}

/// The checks of docs/silent-payments.md 4.4 that need no server state:
/// for the transaction `entry` names, fetched from the server, spdk's
/// receiver computes the same tweak from its inputs (`prevouts` are the
/// outputs they spend) and, with the shared secret `b_scan·tweak`, finds
/// exactly `expected`: vout, sats and label of each output paid to `payee`
/// through a scanned label.
fn check_with_spdk(
    session: &mut Session,
    entry: &Entry,
    payee: &Payee,
    prevouts: &BTreeMap<OutPoint, TxOut>,
    expected: &Paid,
) {
    let raw = session.call("blockchain.transaction.get", json!([entry.1]));
    let tx: Transaction =
        bitcoin::consensus::deserialize(&hex::decode(raw.as_str().expect("hex")).expect("hex"))
            .expect("a transaction");
    assert_eq!(tx.compute_txid().to_string(), entry.1);
    let keys: Vec<PublicKey> = tx
        .input
        .iter()
        .filter_map(|input| {
            let witness: Vec<Vec<u8>> = input.witness.iter().map(<[u8]>::to_vec).collect();
            get_pubkey_from_input(
                input.script_sig.as_bytes(),
                &witness,
                prevouts[&input.previous_output].script_pubkey.as_bytes(),
            )
            .expect("an input spdk can read")
        })
        .collect();
    let outpoints: Vec<silentpayments::utils::OutPoint> = tx
        .input
        .iter()
        .map(|input| {
            silentpayments::utils::OutPoint::from_txid_bytes_and_vout(
                input.previous_output.txid.to_byte_array(),
                input.previous_output.vout,
            )
        })
        .collect();
    let tweak = calculate_tweak_data(&keys.iter().collect::<Vec<_>>(), &outpoints)
        .expect("the tweak of an eligible transaction");
    assert_eq!(
        hex::encode(tweak.serialize()),
        entry.2,
        "tweak of {}",
        entry.1
    );
    let shared_secret = calculate_ecdh_shared_secret(&tweak, payee.scan.secret_key());
    let taproot: Vec<(u32, XOnlyPublicKey)> = tx
        .output
        .iter()
        .enumerate()
        .filter(|(_, out)| out.script_pubkey.is_p2tr())
        .map(|(vout, out)| {
            let key = XOnlyPublicKey::from_slice(&out.script_pubkey.as_bytes()[2..])
                .expect("a taproot output key");
            (vout as u32, key)
        })
        .collect();
    let keys: Vec<XOnlyPublicKey> = taproot.iter().map(|(_, key)| *key).collect();
    let mut found = BTreeMap::new();
    for (label, outputs) in payee
        .spdk
        .scan_transaction(&shared_secret, &keys)
        .expect("spdk scans")
    {
        let label = label.map(|l| payee.label_of(&l));
        for key in outputs.keys() {
            let (vout, _) = taproot
                .iter()
                .find(|(_, k)| k == key)
                .expect("spdk finds only keys it was given");
            let sats = tx.output[*vout as usize].value.to_sat();
            assert!(found.insert(*vout, (sats, label)).is_none());
        }
    }
    assert_eq!(found, *expected, "what spdk finds in {}", entry.1);
}

/// On Bitcoin Core, with spdk as the sending wallet (docs/silent-payments.md,
/// 4.4): Alice subscribes unlabelled, Bob with label 1, as Sparrow does,
/// from the tip, before anything is sent.
/// 1. The test wallet funds coins of the key-hash kinds, taproot and P2WSH.
/// 2. It pays Alice twice in one transaction (k = 0, 1), Bob through label
///    1 and Alice in another, Bob through his change label 0, and Bob
///    through label 2, which he does not scan; inputs mix the counted kinds
///    with P2WSH. Decoys: ordinary taproot outputs, and a transaction
///    spending only P2WSH. Each mempool payment reaches its receivers once,
///    at height 0, with spdk's tweak; spdk's receiver finds in it the
///    outputs and amounts paid; nothing else is sent.
/// 3. Two blocks confirm them all: nothing is sent again (they were sent
///    from the mempool). A new session subscribing from height 0 lists
///    each payment with its block's height, and nothing else.
/// 4. A reorg: the second block is invalidated (its transactions return to
///    the mempool) and another mined without one of them. Both sessions
///    are sent the returned payments at height 0, nothing when the other
///    block confirms them; a new subscription lists the one left out at
///    height 0, the others confirmed.
/// 5. The one left out leaves: a block mined straight from a transaction
///    that spends its coins again (never in the mempool) pays Alice and
///    Bob's label 1. The three live sessions are sent its payments at its
///    height; a new subscription lists them, and nothing of the
///    transaction it replaced.
#[test]
fn core_payments_from_spdk_reach_their_receivers_only() {
    let Some(node) = BitcoindNode::start_or_skip(&BitcoindOptions::default()) else {
        return;
    };
    let seed = seed("silent payments on core");
    let decoy = |i: u64| Key::from_seed(DECOY_KEY_SEED, seed.wrapping_add(i));
    let payees = [Payee::new(0, &[], &[]), Payee::new(1, &[0, 1, 2], &[1])];
    const ALICE: usize = 0;
    const BOB: usize = 1;

    // 1.
    let mut wallet = TestWallet::new();
    node.generate(101).expect("mining to the test wallet's key");
    wallet.sync(&node).expect("wallet sync");
    let kinds = [
        (ScriptKind::P2wpkh, 4),
        (ScriptKind::P2tr, 3),
        (ScriptKind::P2pkh, 2),
        (ScriptKind::P2shP2wpkh, 2),
        (ScriptKind::P2wsh, 3),
    ];
    let funding_outputs: Vec<(ScriptBuf, Amount)> = kinds
        .iter()
        .flat_map(|&(kind, n)| std::iter::repeat_n(kind, n))
        .map(|kind| (wallet.new_script(kind), Amount::from_sat(FUNDING_SATS)))
        .collect();
    let funding = wallet.send_many(&funding_outputs).expect("funding");
    node.send_raw_transaction(&funding).expect("broadcast");
    node.generate(1).expect("mining the funding");
    wallet.sync(&node).expect("wallet sync");
    let funding_txid = funding.compute_txid();
    let coins: Vec<WalletCoin> = wallet
        .coins()
        .filter(|c| c.outpoint.txid == funding_txid && c.spend.txout.value.to_sat() == FUNDING_SATS)
        .cloned()
        .collect();
    assert_eq!(coins.len(), funding_outputs.len());
    let prevouts: BTreeMap<OutPoint, TxOut> = coins
        .iter()
        .map(|c| (c.outpoint, c.spend.txout.clone()))
        .collect();
    // The last transaction sent pays this script: its notification comes
    // after the silent-payment notifications of everything sent before.
    let sentinel_script = wallet.new_script(ScriptKind::P2wpkh);
    let coinbase_to = wallet.address(ScriptKind::P2wpkh);
    let mut sender = Sender {
        wallet,
        coins,
        payees: &payees,
    };
    let (tip, _) = node.tip().expect("tip");

    let dir = tempfile::tempdir().expect("tempdir");
    let osprey = Osprey::start(
        &node,
        &dir.path().join("db"),
        OspreyConfig::with_args(&["--silent-payments"]),
    );
    let mut session = osprey.session();
    session.negotiate(json!("1.4"));
    assert_eq!(
        session.call("server.features", json!([]))["silent_payments"],
        json!([0])
    );
    let subscriptions: Vec<Value> = payees
        .iter()
        .map(|payee| {
            let subscription = session.call(SP_METHOD, payee.subscribe_params(tip));
            let mut labels = vec![0];
            labels.extend(&payee.subscribed);
            assert_eq!(
                subscription,
                json!({
                    "address": payee.receiver.address(),
                    "labels": labels,
                    "start_height": tip,
                })
            );
            subscription
        })
        .collect();
    let history = scan_to_end(&mut session, &subscriptions);
    assert!(
        history.iter().all(BTreeSet::is_empty),
        "nothing paid yet: {history:?}"
    );
    session.call(HEADERS_METHOD, json!([]));
    assert_eq!(
        session.call(SCRIPTHASH_METHOD, json!([scripthash(&sentinel_script)])),
        Value::Null
    );

    // 2.
    let alice_twice = sender.pay(
        &[ScriptKind::P2wpkh, ScriptKind::P2tr, ScriptKind::P2wsh],
        vec![
            (To::Silent(ALICE, None), 30_000),
            (To::Silent(ALICE, None), 40_000),
        ],
    );
    // A wallet that has not spent what this next payment spends: the
    // other branch of the reorg in 5. spends it again.
    let mut other_branch = Sender {
        wallet: sender.wallet.clone(),
        coins: Vec::new(),
        payees: &payees,
    };
    let bob_label_1_and_alice = sender.pay(
        &[ScriptKind::P2pkh, ScriptKind::P2shP2wpkh],
        vec![
            (To::Silent(BOB, Some(1)), 50_000),
            (To::Plain(decoy(1).script_pubkey(ScriptKind::P2tr)), 55_000),
            (To::Silent(ALICE, None), 60_000),
        ],
    );
    let bob_change = sender.pay(
        &[ScriptKind::P2wsh, ScriptKind::P2tr],
        vec![(To::Silent(BOB, Some(0)), 70_000)],
    );
    let bob_label_2 = sender.pay(
        &[ScriptKind::P2wpkh, ScriptKind::P2shP2wpkh],
        vec![(To::Silent(BOB, Some(2)), 80_000)],
    );
    let taproot_decoy = sender.pay(
        &[ScriptKind::P2wpkh, ScriptKind::P2pkh, ScriptKind::P2tr],
        vec![
            (To::Plain(decoy(2).script_pubkey(ScriptKind::P2tr)), 90_000),
            (To::Plain(decoy(3).script_pubkey(ScriptKind::P2tr)), 10_000),
        ],
    );
    let p2wsh_only = sender.pay(
        &[ScriptKind::P2wsh],
        vec![(To::Plain(decoy(4).script_pubkey(ScriptKind::P2tr)), 20_000)],
    );
    let sentinel = sender.pay(
        &[ScriptKind::P2wpkh],
        vec![(To::Plain(sentinel_script), 20_000)],
    );
    let sent = [
        &alice_twice,
        &bob_label_1_and_alice,
        &bob_change,
        &bob_label_2,
        &taproot_decoy,
        &p2wsh_only,
        &sentinel,
    ];
    for s in sent {
        node.send_raw_transaction(&s.tx).expect("broadcast");
    }
    let expected = Expected::new(&sent, &payees);
    let in_mempool = |_: &str| 0;
    assert_eq!(expected.entries(ALICE, in_mempool).len(), 2);
    assert_eq!(expected.entries(BOB, in_mempool).len(), 2);
    session.wait_notification(SCRIPTHASH_METHOD, NOTIFY_TIMEOUT);
    let told = take_received(&mut session, &subscriptions);
    expected.assert_told(&mut session, &told, in_mempool, &payees, &prevouts);

    // 3.
    let first = mine_block(&node, &coinbase_to, &[&alice_twice, &p2wsh_only]);
    let second = mine_block(
        &node,
        &coinbase_to,
        &[
            &bob_label_1_and_alice,
            &bob_change,
            &bob_label_2,
            &taproot_decoy,
            &sentinel,
        ],
    );
    assert_block_brings_nothing(&mut session, &subscriptions, &node, tip + 2, second);
    let heights = confirmed_heights(&node, tip + 1);
    assert_eq!(heights[&alice_twice.tx.compute_txid().to_string()], tip + 1);
    let height_of = |txid: &str| heights.get(txid).map_or(0, |h| u64::from(*h));
    let (mut later, later_subscriptions, listed) = subscribe_from_genesis(&osprey, &payees);
    expected.assert_told(&mut later, &listed, height_of, &payees, &prevouts);
    later.call(HEADERS_METHOD, json!([]));

    // 4.
    node.invalidate_block(&second).expect("invalidateblock");
    // The second block's payments, back in the mempool.
    let returned: Vec<BTreeSet<Entry>> = (0..payees.len())
        .map(|payee| {
            expected
                .entries(payee, in_mempool)
                .into_iter()
                .filter(|(_, txid, _)| heights[txid] == tip + 2)
                .collect()
        })
        .collect();
    assert_eq!(returned[ALICE].len(), 1);
    assert_eq!(returned[BOB].len(), 2);
    for (s, subs) in [
        (&mut session, &subscriptions),
        (&mut later, &later_subscriptions),
    ] {
        receive_exactly(s, subs, &returned);
    }
    let other_block_to = decoy(5).address(ScriptKind::P2wpkh, bitcoin::Network::Regtest);
    let other = mine_block(
        &node,
        &other_block_to,
        &[&bob_change, &bob_label_2, &taproot_decoy, &sentinel],
    );
    for (s, subs) in [
        (&mut session, &subscriptions),
        (&mut later, &later_subscriptions),
    ] {
        assert_block_brings_nothing(s, subs, &node, tip + 2, other);
    }
    // The first block was never undone.
    assert_eq!(node.block_hash(tip + 1).expect("hash"), first);
    let heights = confirmed_heights(&node, tip + 1);
    assert_eq!(
        heights.get(&bob_label_1_and_alice.tx.compute_txid().to_string()),
        None,
        "left in the mempool"
    );
    let height_of = |txid: &str| heights.get(txid).map_or(0, |h| u64::from(*h));
    let (mut last, last_subscriptions, listed) = subscribe_from_genesis(&osprey, &payees);
    expected.assert_told(&mut last, &listed, height_of, &payees, &prevouts);

    // 5.
    let spent: Vec<OutPoint> = bob_label_1_and_alice
        .tx
        .input
        .iter()
        .map(|input| input.previous_output)
        .collect();
    let conflict = other_branch.pay_from(
        &spent,
        vec![
            (To::Silent(BOB, Some(1)), 51_000),
            (To::Silent(ALICE, None), 61_000),
        ],
    );
    let mined: Value = node
        .rpc()
        .call(
            "generateblock",
            &[
                json!(other_block_to.to_string()),
                json!([bitcoin::consensus::encode::serialize_hex(&conflict.tx)]),
            ],
        )
        .expect("generateblock with the conflicting transaction");
    let new_branch = Expected::new(&[&conflict], &payees);
    let arrived: Vec<BTreeSet<Entry>> = (0..payees.len())
        .map(|payee| new_branch.entries(payee, |_| u64::from(tip + 3)))
        .collect();
    assert!(arrived.iter().all(|e| e.len() == 1), "{arrived:?}");
    for (s, subs) in [
        (&mut session, &subscriptions),
        (&mut later, &later_subscriptions),
        (&mut last, &last_subscriptions),
    ] {
        receive_exactly(s, subs, &arrived);
    }
    let heights = confirmed_heights(&node, tip + 1);
    assert_eq!(
        heights.get(&conflict.tx.compute_txid().to_string()),
        Some(&(tip + 3)),
        "{mined}"
    );
    let height_of = |txid: &str| heights.get(txid).map_or(0, |h| u64::from(*h));
    // What the reorgs left: the conflict's payments, not the transaction
    // it replaced (gone from the chain and the mempool).
    let left = Expected::new(
        &[
            &alice_twice,
            &bob_change,
            &bob_label_2,
            &taproot_decoy,
            &p2wsh_only,
            &sentinel,
            &conflict,
        ],
        &payees,
    );
    let (mut newest, _, listed) = subscribe_from_genesis(&osprey, &payees);
    left.assert_told(&mut newest, &listed, height_of, &payees, &prevouts);
}

/// The height of each transaction in the node's blocks from `from` to the
/// tip, by txid.
fn confirmed_heights(node: &dyn Node, from: u32) -> BTreeMap<String, u32> {
    let (tip, _) = node.tip().expect("tip");
    let mut heights = BTreeMap::new();
    for height in from..=tip {
        let block = node
            .get_block(&node.block_hash(height).expect("hash"))
            .expect("block");
        for tx in &block.txdata {
            heights.insert(tx.compute_txid().to_string(), height);
        }
    }
    heights
}
