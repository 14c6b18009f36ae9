//! A node's answer to a JSON-RPC call, as the node client decodes it once
//! ureq has read the HTTP: any status, any body, a single call or a batch.
//!
//! Input: bytes 0-1 are the HTTP status (big-endian, taken modulo 600);
//! byte 2 picks a single call (0) or a batch of that many calls, numbered
//! from 1; the rest is the body. Properties: no panic; a batch that
//! decodes gives exactly one answer per call; an error the node sent keeps
//! its code apart from its message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use osprey_chain::fuzzing::decode_rpc_reply;
use osprey_chain::ErrorKind;

fuzz_target!(|data: &[u8]| {
    let [hi, lo, batch, body @ ..] = data else {
        return;
    };
    let status = u16::from_be_bytes([*hi, *lo]) % 600;
    let batch_len = (*batch > 0).then_some(usize::from(*batch));
    match decode_rpc_reply(status, body, batch_len) {
        Ok(answers) => {
            assert_eq!(answers.len(), batch_len.unwrap_or(1));
            for answer in answers {
                if let Err(e) = answer {
                    assert_eq!(e.method(), Some("fuzz"));
                    assert!(matches!(e.kind(), ErrorKind::Rpc | ErrorKind::Transient));
                    assert!(e.to_string().ends_with(&format!("(code {})", e.code())));
                }
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
