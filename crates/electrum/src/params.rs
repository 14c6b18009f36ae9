//! Typed reading of a call's parameters, by position or by the names the
//! spec gives them ("If using JSON RPC 2.0's feature of parameter passing by
//! name, the names shown in the description ... MUST be used"). Every error
//! names the offending parameter and is `invalid params` (-32602).

use crate::error::RpcError;
use crate::jsonrpc::Params;
use bitcoin::Txid;
use osprey_core::{Height, ScriptHash};
use serde_json::Value;
use std::str::FromStr;

/// The largest script we accept as a `scriptpubkey` parameter, in bytes
/// (consensus caps scripts at 10,000 bytes).
pub const SCRIPT_BYTES_MAX: usize = 10_000;

/// Reads the parameters of one call against the method's parameter names.
pub struct ParamReader<'a> {
    names: &'static [&'static str],
    params: &'a Params,
}

impl<'a> ParamReader<'a> {
    /// Checks that no parameter is unexpected: more positional values than
    /// names, or a name the method does not have. `server.version` passes
    /// `tolerate_extra` because future clients may add arguments to it.
    ///
    /// # Errors
    /// `InvalidParams` naming the extra parameter.
    pub fn new(
        names: &'static [&'static str],
        params: &'a Params,
        tolerate_extra: bool,
    ) -> Result<Self, RpcError> {
        if !tolerate_extra {
            match params {
                Params::None => {}
                Params::Positional(values) if values.len() > names.len() => {
                    return Err(RpcError::InvalidParams(format!(
                        "expected at most {} parameters ({}), got {}",
                        names.len(),
                        names.join(", "),
                        values.len()
                    )));
                }
                Params::Positional(_) => {}
                Params::Named(map) => {
                    if let Some(unknown) = map.keys().find(|k| !names.contains(&k.as_str())) {
                        return Err(RpcError::InvalidParams(format!(
                            "unknown parameter \"{unknown}\" (expected: {})",
                            names.join(", ")
                        )));
                    }
                }
            }
        }
        Ok(ParamReader { names, params })
    }

    fn name(&self, i: usize) -> &'static str {
        self.names[i]
    }

    /// Returns parameter `i`, treating an explicit `null` as absent.
    fn get(&self, i: usize) -> Option<&'a Value> {
        let value = match self.params {
            Params::None => None,
            Params::Positional(values) => values.get(i),
            Params::Named(map) => map.get(self.names[i]),
        };
        value.filter(|v| !v.is_null())
    }

    fn required(&self, i: usize) -> Result<&'a Value, RpcError> {
        self.get(i)
            .ok_or_else(|| RpcError::param(self.name(i), "missing required parameter"))
    }

    fn to_u32(&self, i: usize, value: &Value) -> Result<u32, RpcError> {
        let n = value
            .as_u64()
            .ok_or_else(|| RpcError::param(self.name(i), "must be a non-negative integer"))?;
        u32::try_from(n).map_err(|_| RpcError::param(self.name(i), "is too large"))
    }

    pub fn u32(&self, i: usize) -> Result<u32, RpcError> {
        self.to_u32(i, self.required(i)?)
    }

    pub fn opt_u32(&self, i: usize) -> Result<Option<u32>, RpcError> {
        self.get(i).map(|v| self.to_u32(i, v)).transpose()
    }

    pub fn height(&self, i: usize) -> Result<Height, RpcError> {
        self.u32(i).map(Height)
    }

    pub fn opt_height(&self, i: usize) -> Result<Option<Height>, RpcError> {
        self.opt_u32(i).map(|h| h.map(Height))
    }

    pub fn bool_or(&self, i: usize, default: bool) -> Result<bool, RpcError> {
        match self.get(i) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(RpcError::param(self.name(i), "must be a boolean")),
        }
    }

    pub fn opt_str(&self, i: usize) -> Result<Option<&'a str>, RpcError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(RpcError::param(self.name(i), "must be a string")),
        }
    }

    pub fn str(&self, i: usize) -> Result<&'a str, RpcError> {
        self.opt_str(i)?
            .ok_or_else(|| RpcError::param(self.name(i), "missing required parameter"))
    }

    /// Returns the raw parameter, for shapes the caller checks itself.
    pub fn opt_value(&self, i: usize) -> Option<&'a Value> {
        self.get(i)
    }

    pub fn scripthash(&self, i: usize) -> Result<ScriptHash, RpcError> {
        let s = self.str(i)?;
        ScriptHash::from_str(s).map_err(|e| RpcError::param(self.name(i), e))
    }

    pub fn txid(&self, i: usize) -> Result<Txid, RpcError> {
        let s = self.str(i)?;
        parse_txid(s).map_err(|why| RpcError::param(self.name(i), why))
    }

    /// Returns a non-empty hex string of whole bytes, unchanged.
    pub fn hex(&self, i: usize) -> Result<&'a str, RpcError> {
        let s = self.str(i)?;
        check_hex(s, false).map_err(|why| RpcError::param(self.name(i), why))?;
        Ok(s)
    }

    /// Returns the script bytes of a script hex parameter (`scriptpubkey`,
    /// `spk_hint`).
    pub fn script(&self, i: usize) -> Result<Vec<u8>, RpcError> {
        let s = self.str(i)?;
        check_hex(s, true).map_err(|why| RpcError::param(self.name(i), why))?;
        if s.len() / 2 > SCRIPT_BYTES_MAX {
            return Err(RpcError::param(
                self.name(i),
                format!("script longer than {SCRIPT_BYTES_MAX} bytes"),
            ));
        }
        hex::decode(s).map_err(|e| RpcError::param(self.name(i), e))
    }

    /// Returns an array of non-empty hex strings.
    pub fn hex_list(&self, i: usize) -> Result<Vec<String>, RpcError> {
        let Value::Array(items) = self.required(i)? else {
            return Err(RpcError::param(
                self.name(i),
                "must be an array of hex strings",
            ));
        };
        items
            .iter()
            .enumerate()
            .map(|(k, item)| {
                let s = item.as_str().ok_or_else(|| {
                    RpcError::param(self.name(i), format!("element {k} must be a hex string"))
                })?;
                check_hex(s, false)
                    .map_err(|why| RpcError::param(self.name(i), format!("element {k}: {why}")))?;
                Ok(s.to_string())
            })
            .collect()
    }
}

/// Checks that `s` is hex of whole bytes (and non-empty unless allowed).
pub fn check_hex(s: &str, allow_empty: bool) -> Result<(), String> {
    if s.is_empty() && !allow_empty {
        return Err("must not be empty".into());
    }
    if !s.len().is_multiple_of(2) {
        return Err(format!("odd number of hex characters ({})", s.len()));
    }
    match s.bytes().position(|b| !b.is_ascii_hexdigit()) {
        Some(at) => Err(format!("invalid hex character at position {at}")),
        None => Ok(()),
    }
}

/// Parses a txid as Electrum shows it (64 hex characters, reversed bytes).
pub fn parse_txid(s: &str) -> Result<Txid, String> {
    if s.len() != 64 {
        return Err(format!("expected 64 hex characters, got {}", s.len()));
    }
    check_hex(s, false)?;
    Txid::from_str(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NAMES: &[&str] = &["height", "cp_height"];

    fn positional(v: Value) -> Params {
        Params::Positional(v.as_array().unwrap().clone())
    }

    fn named(v: Value) -> Params {
        Params::Named(v.as_object().unwrap().clone())
    }

    #[test]
    fn reads_by_position_and_by_name() {
        for params in [
            positional(json!([5, 8])),
            named(json!({"height": 5, "cp_height": 8})),
        ] {
            let r = ParamReader::new(NAMES, &params, false).unwrap();
            assert_eq!(r.height(0).unwrap(), Height(5));
            assert_eq!(r.opt_height(1).unwrap(), Some(Height(8)));
        }
        let params = named(json!({"height": 5}));
        let r = ParamReader::new(NAMES, &params, false).unwrap();
        assert_eq!(r.opt_height(1).unwrap(), None);
        let params = positional(json!([5, null]));
        let r = ParamReader::new(NAMES, &params, false).unwrap();
        assert_eq!(r.opt_height(1).unwrap(), None, "null is absent");
    }

    #[test]
    fn rejects_extra_and_unknown_params() {
        let params = positional(json!([1, 2, 3]));
        let e = ParamReader::new(NAMES, &params, false).err().unwrap();
        assert_eq!(e.code(), -32602);
        assert!(ParamReader::new(NAMES, &params, true).is_ok());
        let params = named(json!({"height": 1, "checkpoint": 2}));
        let e = ParamReader::new(NAMES, &params, false).err().unwrap();
        assert!(e.to_string().contains("checkpoint"), "{e}");
    }

    #[test]
    fn integers_must_be_non_negative_and_fit() {
        for (v, want) in [
            (json!([-1]), "height: must be a non-negative integer"),
            (json!([1.5]), "height: must be a non-negative integer"),
            (json!(["5"]), "height: must be a non-negative integer"),
            (json!([4294967296u64]), "height: is too large"),
            (json!([]), "height: missing required parameter"),
        ] {
            let params = positional(v);
            let r = ParamReader::new(NAMES, &params, false).unwrap();
            let e = r.height(0).unwrap_err();
            assert_eq!(e, RpcError::InvalidParams(want.into()));
        }
    }

    #[test]
    fn hashes_and_hex_are_checked() {
        const N: &[&str] = &["scripthash"];
        let good = "8b01df4e368ea28f8dc0423bcf7a4923e3a12d307c875e47a0cfbf90b5c39161";
        let params = positional(json!([good]));
        let r = ParamReader::new(N, &params, false).unwrap();
        assert_eq!(r.scripthash(0).unwrap().to_string(), good);
        assert_eq!(r.txid(0).unwrap().to_string(), good);
        for bad in [
            json!([&good[..62]]),
            json!([good.replace('8', "g")]),
            json!([42]),
        ] {
            let params = positional(bad);
            let r = ParamReader::new(N, &params, false).unwrap();
            let e = r.scripthash(0).unwrap_err();
            assert!(
                e.to_string().starts_with("invalid params: scripthash: "),
                "{e}"
            );
            assert!(r.txid(0).is_err());
        }
        assert!(check_hex("0a0B", false).is_ok());
        assert!(check_hex("", false).is_err());
        assert!(check_hex("", true).is_ok());
        assert!(check_hex("abc", false).unwrap_err().contains("odd"));
        assert!(check_hex("zz", false).unwrap_err().contains("position 0"));
    }

    #[test]
    fn booleans_and_lists() {
        const N: &[&str] = &["raw_txs", "verbose"];
        let params = positional(json!([["00", "ab"], true]));
        let r = ParamReader::new(N, &params, false).unwrap();
        assert_eq!(r.hex_list(0).unwrap(), vec!["00", "ab"]);
        assert!(r.bool_or(1, false).unwrap());
        let params = positional(json!([["00", 1], "yes"]));
        let r = ParamReader::new(N, &params, false).unwrap();
        assert!(r.hex_list(0).unwrap_err().to_string().contains("element 1"));
        assert!(r
            .bool_or(1, false)
            .unwrap_err()
            .to_string()
            .contains("verbose"));
    }
}
