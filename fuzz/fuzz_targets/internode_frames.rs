//! Internode decoding: RPC frames through the Opener (header checks before any sizing), the
//! handshake messages, and drive-protocol requests and responses. The first byte picks the
//! decoder (and, for requests, the next two the method). No panic; an Opener never asks for more
//! than the largest frame.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use quarry_net::auth::decode_message;
use quarry_net::drive_proto::{decode_request, decode_response};
use quarry_net::wire::{Decoded, Opener, DEFAULT_MAX_PAYLOAD, HEADER_LEN, TAG_LEN};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            let mut o = Opener::new(&[7; 32], DEFAULT_MAX_PAYLOAD);
            let mut buf = BytesMut::from(rest);
            if let Ok(Decoded::Need(n)) = o.open(&mut buf) {
                assert!(n <= HEADER_LEN + DEFAULT_MAX_PAYLOAD as usize + TAG_LEN);
            }
            let _ = o.open_exact(rest);
        }
        1 => {
            let _ = decode_message(rest);
        }
        2 if rest.len() >= 2 => {
            let method = u16::from_be_bytes([rest[0], rest[1]]);
            let _ = decode_request(method, Bytes::copy_from_slice(&rest[2..]));
        }
        _ => {
            let _ = decode_response(Bytes::copy_from_slice(rest));
        }
    }
});
