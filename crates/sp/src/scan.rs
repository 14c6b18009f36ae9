//! A receiver's keys and the two scans: the `k = 0` kernel a server runs on
//! every record (docs/silent-payments.md, 2.4) and BIP-352's full
//! "Scanning" loop, for the tests and for clients.

use std::fmt;

use bitcoin::secp256k1::{ecdh, PublicKey, Scalar, SecretKey};
use bitcoin::Network;

use crate::field::{batch_invert, Fe};
use crate::hash::{label_tweak, shared_secret_tweak};
use crate::{address, Error, Record, TweakData, K_MAX, OUTPUT_PREFIX_LEN, SECP};

/// BIP-352 "Scanning": "always check for the change label", `m = 0`.
const CHANGE_LABEL: u32 = 0;

/// What a server holds for one subscription: `b_scan` (a third party's
/// secret: erased, best effort, on drop), `B_spend`, and the labels it
/// scans with their tweaks and points, computed once.
pub struct ScanKeys {
    scan_secret: SecretKey,
    scan_public: PublicKey,
    spend_public: PublicKey,
    /// Ascending by `m`, the change label first.
    labels: Vec<Label>,
    /// What the batched kernel adds `t_0·G` to, in the order of a
    /// record's candidates: `B_spend`, then `B_spend + label_m·G` for each
    /// label, affine (`None` for a sum that is the point at infinity).
    addends: Vec<Option<Affine>>,
}

/// A point's affine coordinates `(x, y)`.
type Affine = (Fe, Fe);

struct Label {
    m: u32,
    /// `label_m = hash_BIP0352/Label(ser256(b_scan) || ser32(m))`.
    tweak: SecretKey,
    /// `label_m·G`.
    point: PublicKey,
}

/// An output found by the full scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundOutput {
    /// Its x-only key.
    pub output_key: [u8; 32],
    pub k: u32,
    /// The label it was paid to, `None` for the unlabelled address.
    pub label: Option<u32>,
    /// `t_k`, plus `label_m` for a labelled output: the spending key is
    /// `b_spend` plus this (BIP-352 "Spending").
    pub spend_key_tweak: SecretKey,
}

impl ScanKeys {
    /// Keys scanning the change label and `labels` (duplicates, and the
    /// change label itself, are ignored).
    pub fn new(
        scan_secret: SecretKey,
        spend_public: PublicKey,
        labels: impl IntoIterator<Item = u32>,
    ) -> Result<ScanKeys, Error> {
        let mut ms: Vec<u32> = labels.into_iter().chain([CHANGE_LABEL]).collect();
        ms.sort_unstable();
        ms.dedup();
        let labels = ms
            .into_iter()
            .map(|m| {
                let tweak = label_tweak(&scan_secret, m)?;
                Ok(Label {
                    m,
                    tweak,
                    point: PublicKey::from_secret_key(&SECP, &tweak),
                })
            })
            .collect::<Result<Vec<Label>, Error>>()?;
        let mut addends = vec![Some(affine(&spend_public)?)];
        for label in &labels {
            addends.push(match spend_public.combine(&label.point) {
                Ok(sum) => Some(affine(&sum)?),
                Err(_) => None,
            });
        }
        Ok(ScanKeys {
            scan_secret,
            scan_public: PublicKey::from_secret_key(&SECP, &scan_secret),
            spend_public,
            labels,
            addends,
        })
    }

    /// From the bytes a client sends: `b_scan`, 32 bytes big-endian, a
    /// valid secret key; `B_spend` in SEC1 compressed form (33 bytes).
    pub fn from_slices(
        scan_secret: &[u8],
        spend_public: &[u8],
        labels: impl IntoIterator<Item = u32>,
    ) -> Result<ScanKeys, Error> {
        let scan_secret = SecretKey::from_slice(scan_secret).map_err(|_| Error::ScanKey)?;
        // `from_slice` would also take a 65-byte uncompressed key.
        if spend_public.len() != 33 {
            return Err(Error::SpendKey);
        }
        let spend_public = PublicKey::from_slice(spend_public).map_err(|_| Error::SpendKey)?;
        ScanKeys::new(scan_secret, spend_public, labels)
    }

    pub fn scan_public_key(&self) -> &PublicKey {
        &self.scan_public
    }

    pub fn spend_public_key(&self) -> &PublicKey {
        &self.spend_public
    }

    /// The labels scanned, ascending, the change label 0 first.
    pub fn labels(&self) -> impl Iterator<Item = u32> + '_ {
        self.labels.iter().map(|label| label.m)
    }

    /// The unlabelled address, `(B_scan, B_spend)`.
    pub fn address(&self, network: Network) -> String {
        address(&self.scan_public, &self.spend_public, network)
    }

    /// The address of label `m`, `(B_scan, B_spend + label_m·G)`, whether
    /// or not these keys scan it.
    pub fn labelled_address(&self, m: u32, network: Network) -> Result<String, Error> {
        let tweak = label_tweak(&self.scan_secret, m)?;
        let labelled = self
            .spend_public
            .combine(&PublicKey::from_secret_key(&SECP, &tweak))
            .map_err(|_| Error::Derivation("B_spend + label·G is the point at infinity"))?;
        Ok(address(&self.scan_public, &labelled, network))
    }

    /// `ser_P(ecdh_shared_secret)`, `ecdh_shared_secret = input_hash·b_scan·A`
    /// ("Scanning"). `input_hash·b_scan` is a scalar product (cheap), so the
    /// stored factors cost the scanner nothing over a stored product; the
    /// point multiplication is libsecp256k1's constant-time ECDH because
    /// the scalar is the client's secret.
    pub fn shared_secret(&self, tweak: &TweakData) -> Result<[u8; 33], Error> {
        let mut scalar = self
            .scan_secret
            .mul_tweak(&Scalar::from(*tweak.input_hash()))
            .map_err(|_| Error::Derivation("input_hash·b_scan is zero"))?;
        let xy = ecdh::shared_secret_point(tweak.input_key_sum(), &scalar);
        scalar.non_secure_erase();
        // SEC1 compressed: 02 or 03 by the parity of y, then x.
        let mut serialized = [0u8; 33];
        serialized[0] = 0x02 | (xy[63] & 1);
        serialized[1..].copy_from_slice(&xy[..32]);
        Ok(serialized)
    }

    /// `P_k = B_spend + t_k·G`. The generator multiplication is the
    /// constant-time one, `t_k` being derived from the shared secret.
    fn output_key(&self, t_k: &SecretKey) -> Result<PublicKey, Error> {
        PublicKey::from_secret_key(&SECP, t_k)
            .combine(&self.spend_public)
            .map_err(|_| Error::Derivation("B_spend + t_k·G is the point at infinity"))
    }

    /// `P + label_m·G` for each scanned label, in label order.
    fn labelled_keys<'s>(
        &'s self,
        output_key: &'s PublicKey,
    ) -> impl Iterator<Item = Result<(&'s Label, [u8; 32]), Error>> + 's {
        self.labels.iter().map(move |label| {
            output_key
                .combine(&label.point)
                .map(|key| (label, x_only(&key)))
                .map_err(|_| Error::Derivation("P_k + label·G is the point at infinity"))
        })
    }

    /// The kernel a server runs on every eligible transaction: the x-only
    /// keys the first output (`k = 0`) of a payment to these keys would
    /// have in it, unlabelled and with each scanned label. A sender numbers
    /// `k` across all of a scan key's outputs in a transaction ("Creating
    /// outputs"), so a paying transaction always holds one of them, unless
    /// it paid `k = 0` to a label not scanned.
    pub fn first_output_candidates(&self, tweak: &TweakData) -> Result<Candidates, Error> {
        let t_0 = shared_secret_tweak(&self.shared_secret(tweak)?, 0)?;
        let p_0 = self.output_key(&t_0)?;
        let mut keys = Vec::with_capacity(1 + self.labels.len());
        keys.push(x_only(&p_0));
        for labelled in self.labelled_keys(&p_0) {
            keys.push(labelled?.1);
        }
        Ok(Candidates { keys })
    }

    /// [`first_output_candidates`](Self::first_output_candidates) of every
    /// record of `tweaks`, into `batch` (emptied first; its buffers are
    /// reused). The two multiplications of each record are the same; the
    /// additions that follow them, `t_0·G + B_spend` and `t_0·G + B_spend +
    /// label_m·G` (the latter sums computed once, in [`ScanKeys::new`]), are
    /// done here in affine coordinates with one field inversion for the
    /// whole batch, where libsecp256k1 pays one per addition. A record
    /// whose `t_0·G` is `±` one of those sums (the affine formula does not
    /// cover it; probability about 2^-256 but for keys chosen to meet a
    /// given transaction) gets the single-record kernel's answer instead,
    /// so the candidates, and the records whose derivation fails, are the
    /// same.
    pub fn first_output_candidates_batch(&self, tweaks: &[TweakData], batch: &mut CandidateBatch) {
        let width = self.addends.len();
        batch.width = width;
        batch.keys.clear();
        batch.keys.resize(tweaks.len() * width, [0; 32]);
        batch.records.clear();
        batch.denominators.clear();
        for (record, tweak) in tweaks.iter().enumerate() {
            let point = self
                .shared_secret(tweak)
                .and_then(|shared_secret| shared_secret_tweak(&shared_secret, 0))
                .and_then(|t_0| affine(&PublicKey::from_secret_key(&SECP, &t_0)));
            let derived = match point {
                Ok((x, y)) => {
                    // x(Q) − x(T) for each addend Q; 1 for an addend at
                    // infinity (nothing to divide).
                    batch.denominators.extend(
                        self.addends
                            .iter()
                            .map(|addend| addend.map_or(Fe::ONE, |(addend_x, _)| addend_x.sub(x))),
                    );
                    let denominators = &mut batch.denominators[record * width..];
                    if denominators.iter().any(|d| d.is_zero()) {
                        // Keeps the batch free of zeros.
                        denominators.fill(Fe::ONE);
                        match self.first_output_candidates(tweak) {
                            Ok(candidates) => {
                                batch.keys[record * width..(record + 1) * width]
                                    .copy_from_slice(&candidates.keys);
                                Derived::Exact
                            }
                            Err(_) => Derived::Failed,
                        }
                    } else {
                        Derived::Affine((x, y))
                    }
                }
                Err(_) => {
                    batch.denominators.extend((0..width).map(|_| Fe::ONE));
                    Derived::Failed
                }
            };
            batch.records.push(derived);
        }
        batch_invert(&mut batch.denominators, &mut batch.scratch);
        for (record, derived) in batch.records.iter().enumerate() {
            let Derived::Affine((x, y)) = *derived else {
                continue;
            };
            let inverses = &batch.denominators[record * width..(record + 1) * width];
            let keys = &mut batch.keys[record * width..(record + 1) * width];
            for ((addend, inverse), key) in self.addends.iter().zip(inverses).zip(keys) {
                *key = match addend {
                    // T + Q: λ = (y_Q − y_T) / (x_Q − x_T), x = λ² − x_T − x_Q.
                    Some((addend_x, addend_y)) => {
                        let slope = addend_y.sub(y).mul(*inverse);
                        slope.square().sub(x).sub(*addend_x).to_be_bytes()
                    }
                    // B_spend + label_m·G is the point at infinity: the
                    // candidate is t_0·G itself.
                    None => x.to_be_bytes(),
                };
            }
        }
    }

    /// BIP-352 "Scanning" in full: the outputs among `output_keys` (the
    /// x-only keys of all the transaction's taproot outputs) that pay these
    /// keys, for `k = 0, 1, ...` until a `k` finds none or `k` reaches
    /// `K_max`.
    ///
    /// The BIP finds labels by subtracting `P_k` from each output and
    /// looking the difference (or that of the negated output) up among the
    /// label points; adding each label point to `P_k` and comparing
    /// x-coordinates finds the same outputs (x-only equality covers both
    /// parities) and costs one addition per label rather than two per
    /// output. The BIP's footnote on precomputed labels describes this
    /// alternative.
    pub fn scan_outputs(
        &self,
        tweak: &TweakData,
        output_keys: &[[u8; 32]],
    ) -> Result<Vec<FoundOutput>, Error> {
        let shared_secret = self.shared_secret(tweak)?;
        let mut remaining = output_keys.to_vec();
        let mut found = Vec::new();
        for k in 0..K_MAX {
            let t_k = shared_secret_tweak(&shared_secret, k)?;
            let p_k = self.output_key(&t_k)?;
            let unlabelled = x_only(&p_k);
            let labelled = self.labelled_keys(&p_k).collect::<Result<Vec<_>, _>>()?;
            // Outputs in order, each tested unlabelled first, as the BIP
            // and `reference.py` do.
            let hit = remaining.iter().enumerate().find_map(|(index, output)| {
                if *output == unlabelled {
                    Some((index, None))
                } else {
                    labelled
                        .iter()
                        .find(|(_, key)| key == output)
                        .map(|(label, _)| (index, Some(*label)))
                }
            });
            let Some((index, label)) = hit else {
                break;
            };
            let spend_key_tweak = match label {
                None => t_k,
                Some(label) => t_k
                    .add_tweak(&Scalar::from(label.tweak))
                    .map_err(|_| Error::Derivation("t_k + label is zero"))?,
            };
            found.push(FoundOutput {
                output_key: remaining.remove(index),
                k,
                label: label.map(|label| label.m),
                spend_key_tweak,
            });
        }
        Ok(found)
    }
}

impl Drop for ScanKeys {
    /// Best effort only: copies made by callers, registers and freed memory
    /// are out of reach (docs/silent-payments.md, 3.6).
    fn drop(&mut self) {
        self.scan_secret.non_secure_erase();
        for label in &mut self.labels {
            label.tweak.non_secure_erase();
        }
    }
}

impl fmt::Debug for ScanKeys {
    /// Never the scan key: this can end up in a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScanKeys")
            .field("scan_public_key", &format_args!("{}", self.scan_public))
            .field("spend_public_key", &format_args!("{}", self.spend_public))
            .field("labels", &self.labels().collect::<Vec<_>>())
            .finish()
    }
}

/// The x-only keys a transaction's first silent-payment output would have
/// for one receiver (unlabelled first, then each scanned label).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidates {
    keys: Vec<[u8; 32]>,
}

impl Candidates {
    pub fn keys(&self) -> &[[u8; 32]] {
        &self.keys
    }

    /// The candidates whose first bytes are among a record's output-key
    /// prefixes. Each is a payment only if the transaction really has that
    /// output key: a false hit comes about once per 2^32 comparisons (once
    /// per 256 under `short-prefixes`), so the caller confirms each.
    pub fn prefix_hits<'c, 'r: 'c>(
        &'c self,
        record: &Record<'r>,
    ) -> impl Iterator<Item = &'c [u8; 32]> + 'c {
        prefix_hits(&self.keys, record)
    }

    /// Whether some candidate is one of `output_keys` (the transaction's
    /// full taproot output keys, as the mempool holds them).
    pub fn any_in(&self, output_keys: &[[u8; 32]]) -> bool {
        self.keys.iter().any(|key| output_keys.contains(key))
    }
}

/// The first-output candidates of a batch of records
/// ([`ScanKeys::first_output_candidates_batch`]), with the buffers that
/// computed them, kept for the next batch.
#[derive(Debug, Default)]
pub struct CandidateBatch {
    /// Candidates per record.
    width: usize,
    /// `width` keys per record, in the order of [`Candidates::keys`].
    keys: Vec<[u8; 32]>,
    records: Vec<Derived>,
    /// x(Q) − x(T) per record and addend, then their inverses.
    denominators: Vec<Fe>,
    scratch: Vec<Fe>,
}

/// How a record of a batch got its candidates.
#[derive(Clone, Copy, Debug)]
enum Derived {
    /// Its derivation failed: it pays no one.
    Failed,
    /// By the single-record kernel (`t_0·G` is `±` an addend).
    Exact,
    /// By the batch's affine additions to this `t_0·G`.
    Affine(Affine),
}

impl CandidateBatch {
    pub fn new() -> CandidateBatch {
        CandidateBatch::default()
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Record `record`'s candidates, as [`Candidates::keys`]; `None` if
    /// its derivation failed (or there is no such record).
    pub fn keys(&self, record: usize) -> Option<&[[u8; 32]]> {
        match self.records.get(record)? {
            Derived::Failed => None,
            Derived::Exact | Derived::Affine(_) => {
                Some(&self.keys[record * self.width..(record + 1) * self.width])
            }
        }
    }

    /// As [`Candidates::prefix_hits`], for record `record` (none if its
    /// derivation failed).
    pub fn prefix_hits<'c, 'r: 'c>(
        &'c self,
        record: usize,
        of: &Record<'r>,
    ) -> impl Iterator<Item = &'c [u8; 32]> + 'c {
        prefix_hits(self.keys(record).unwrap_or(&[]), of)
    }
}

/// The keys among `keys` whose first bytes are among `record`'s output-key
/// prefixes.
fn prefix_hits<'c, 'r: 'c>(
    keys: &'c [[u8; 32]],
    record: &Record<'r>,
) -> impl Iterator<Item = &'c [u8; 32]> + 'c {
    let record = *record;
    keys.iter().filter(move |key| {
        record
            .output_prefixes()
            .any(|prefix| prefix == &key[..OUTPUT_PREFIX_LEN])
    })
}

/// A point's affine coordinates, as libsecp256k1 gives them (always below
/// the field's prime, so the error is never expected).
fn affine(key: &PublicKey) -> Result<Affine, Error> {
    let bytes = key.serialize_uncompressed();
    let coordinate = |range: std::ops::Range<usize>| {
        let mut field = [0u8; 32];
        field.copy_from_slice(&bytes[range]);
        Fe::from_be_bytes(&field).ok_or(Error::Derivation("a coordinate above the field's prime"))
    };
    Ok((coordinate(1..33)?, coordinate(33..65)?))
}

fn x_only(key: &PublicKey) -> [u8; 32] {
    key.x_only_public_key().0.serialize()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    #[test]
    fn malformed_keys_are_errors() {
        let scan = secret(1).secret_bytes();
        let spend = public(2).serialize();
        assert!(ScanKeys::from_slices(&scan, &spend, []).is_ok());
        let order = hex::decode("fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141")
            .unwrap();
        for bad_scan in [
            &scan[..31],
            &[0; 32][..],
            &order[..],
            &[0xff; 32][..],
            &[&scan[..], &[0]].concat()[..],
        ] {
            assert_eq!(
                ScanKeys::from_slices(bad_scan, &spend, []).err(),
                Some(Error::ScanKey)
            );
        }
        let uncompressed = public(2).serialize_uncompressed();
        let mut bad_prefix = spend;
        bad_prefix[0] = 0x04;
        // x = 0 is not on the curve.
        let mut off_curve = [0u8; 33];
        off_curve[0] = 0x02;
        for bad_spend in [
            &uncompressed[..],
            &bad_prefix[..],
            &off_curve[..],
            &spend[..32],
            &[][..],
        ] {
            assert_eq!(
                ScanKeys::from_slices(&scan, bad_spend, []).err(),
                Some(Error::SpendKey)
            );
        }
    }

    #[test]
    fn the_change_label_is_always_scanned() {
        let keys = ScanKeys::new(secret(1), public(2), [9, 3, 0, 9, u32::MAX]).unwrap();
        assert_eq!(keys.labels().collect::<Vec<_>>(), [0, 3, 9, u32::MAX]);
        let keys = ScanKeys::new(secret(1), public(2), []).unwrap();
        assert_eq!(keys.labels().collect::<Vec<_>>(), [0]);
        assert_eq!(*keys.scan_public_key(), public(1));
        assert_eq!(*keys.spend_public_key(), public(2));
        // The label-0 address differs from the unlabelled one.
        assert_ne!(
            keys.labelled_address(0, Network::Bitcoin).unwrap(),
            keys.address(Network::Bitcoin)
        );
    }

    /// Tweak data of a record: `A = public(i)`, `input_hash = secret(1000 + i)`.
    fn tweak(i: u32) -> TweakData {
        let mut sum = [0u8; 64];
        sum.copy_from_slice(&public(i).serialize_uncompressed()[1..]);
        TweakData::from_bytes(&sum, &secret(1000 + i).secret_bytes()).unwrap()
    }

    /// Every record's candidates from the batch equal the single-record
    /// kernel's, and a record whose derivation fails has none in both.
    fn assert_batch_is_exact(keys: &ScanKeys, tweaks: &[TweakData]) {
        let mut batch = CandidateBatch::new();
        keys.first_output_candidates_batch(tweaks, &mut batch);
        assert_eq!(batch.len(), tweaks.len());
        for (i, tweak) in tweaks.iter().enumerate() {
            let single = keys.first_output_candidates(tweak).ok();
            assert_eq!(
                batch.keys(i),
                single.as_ref().map(Candidates::keys),
                "record {i}"
            );
        }
        assert_eq!(batch.keys(tweaks.len()), None);
    }

    #[test]
    fn the_batch_kernel_gives_the_single_record_kernels_candidates() {
        let tweaks: Vec<TweakData> = (1..=40).map(tweak).collect();
        for labels in [&[][..], &[1, 2, 3][..], &[7, 1_000_000][..]] {
            for receiver in 0..3 {
                let keys = ScanKeys::new(
                    secret(50 + receiver),
                    public(60 + receiver),
                    labels.iter().copied(),
                )
                .unwrap();
                assert_batch_is_exact(&keys, &tweaks);
            }
        }
        // A batch reused for fewer records, and an empty one.
        let keys = ScanKeys::new(secret(50), public(60), [4]).unwrap();
        let mut batch = CandidateBatch::new();
        keys.first_output_candidates_batch(&tweaks, &mut batch);
        keys.first_output_candidates_batch(&tweaks[..3], &mut batch);
        assert_eq!(batch.len(), 3);
        assert_eq!(
            batch.keys(2),
            Some(keys.first_output_candidates(&tweaks[2]).unwrap().keys())
        );
        keys.first_output_candidates_batch(&[], &mut batch);
        assert!(batch.is_empty());
    }

    /// Spend keys chosen against one record (`t_0·G = T` known to the
    /// receiver, who knows `b_scan`): each sum the affine formula cannot
    /// take (a doubling, or the point at infinity) falls back to the exact
    /// kernel, and a spend key at `−label·G` makes a label's sum infinite.
    #[test]
    fn the_batch_kernel_is_exact_where_affine_additions_break_down() {
        let scan = secret(70);
        let probe = ScanKeys::new(scan, public(71), [5]).unwrap();
        let target = tweak(3);
        let t_0 = shared_secret_tweak(&probe.shared_secret(&target).unwrap(), 0).unwrap();
        let point = PublicKey::from_secret_key(&SECP, &t_0);
        let change = probe.labels[0].point;
        let five = probe.labels[1].point;
        let minus = |key: PublicKey| key.negate(&SECP);
        let spend_keys = [
            // B_spend = T: P_0 = 2T, a doubling.
            point,
            // B_spend = −T: P_0 is the point at infinity; the record fails.
            minus(point),
            // B_spend + label·G = −T: that candidate is at infinity; fails.
            minus(point.combine(&five).unwrap()),
            minus(point.combine(&change).unwrap()),
            // B_spend + label·G = T: a doubling for that label.
            point.combine(&minus(five)).unwrap(),
            // B_spend = −label·G: that sum is at infinity, its candidate T.
            minus(five),
            minus(change),
        ];
        let tweaks: Vec<TweakData> = [1, 2, 3, 4, 3, 5].into_iter().map(tweak).collect();
        for spend in spend_keys {
            let keys = ScanKeys::new(scan, spend, [5]).unwrap();
            assert_batch_is_exact(&keys, &tweaks);
        }
        // The cases happen: a failure and an infinite sum are among them.
        let keys = ScanKeys::new(scan, minus(point), [5]).unwrap();
        assert!(keys.first_output_candidates(&target).is_err());
        let keys = ScanKeys::new(scan, minus(five), [5]).unwrap();
        assert!(keys.addends.iter().any(Option::is_none));
    }

    #[test]
    fn debug_never_shows_the_scan_key() {
        let keys = ScanKeys::new(secret(1), public(2), [5]).unwrap();
        let text = format!("{keys:?}");
        let secret_hex = hex::encode(secret(1).secret_bytes());
        assert!(!text.contains(&secret_hex), "{text}");
        assert!(text.contains(&public(1).to_string()), "{text}");
        assert!(text.contains("[0, 5]"), "{text}");
    }
}
