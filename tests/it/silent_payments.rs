//! Silent payments end to end with the real binary: a chaingen chain with
//! silent payments, fed to btcd, indexed with `--silent-payments`; each of
//! the manifest's receivers subscribes from height 0 as Sparrow does
//! (positional, its labels), and the notifications up to progress 1.0 list
//! exactly the manifest's payments with their heights and tweaks; the
//! subscription each repeats is the one answered.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::command::{generate_chain, submit_chain};
use crate::common::{start_btcd, Osprey, OspreyConfig};

/// How long a whole historical scan of the small chain may take.
const SCAN_TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn subscriptions_report_the_manifests_payments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (chain, manifest) = generate_chain(
        dir.path(),
        &["--preset", "tiny", "--seed", "11", "--sp-share", "0.3"],
    );
    let receivers = manifest
        .silent_payments
        .clone()
        .expect("a chain with silent payments");
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
            "blockchain.silentpayments.subscribe",
            json!([
                receiver.scan_private_key,
                receiver.spend_public_key,
                0,
                receiver.labels,
            ]),
        );
        assert_eq!(subscription["address"], receiver.address);
        assert_eq!(subscription["start_height"], 0);
        let mut found = BTreeSet::new();
        let mut progress = 0.0;
        loop {
            let n = session.wait_notification("blockchain.silentpayments.subscribe", SCAN_TIMEOUT);
            let params = &n["params"];
            assert_eq!(params[0], subscription, "{n}");
            let p = params[1].as_f64().expect("progress");
            assert!(p >= progress, "progress {p} after {progress}");
            progress = p;
            for entry in params[2].as_array().expect("history") {
                let keys: BTreeSet<&str> = entry
                    .as_object()
                    .expect("entry")
                    .keys()
                    .map(String::as_str)
                    .collect();
                assert_eq!(keys, BTreeSet::from(["height", "tweak_key", "tx_hash"]));
                found.insert(entry_of(entry));
            }
            if p >= 1.0 {
                break;
            }
        }
        let expected: BTreeSet<(u64, String, String)> = receiver
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
