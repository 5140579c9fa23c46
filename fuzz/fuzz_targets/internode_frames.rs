//! Internode decoding: RPC frames through the Opener (header checks before any sizing), the
//! handshake messages, the error-frame payload, drive-protocol requests and responses, the verbs
//! data plane's messages, the lock service's and the node info's messages, and the internode
//! codec's values. The first byte picks the decoder (and, for drive requests, the next two the
//! method). No panic; an Opener never asks for more than the largest frame; a codec value that
//! decodes encodes back to the same bytes.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use quarry_net::auth::decode_message;
use quarry_net::codec;
use quarry_net::drive_proto::{decode_request, decode_response};
use quarry_net::verbs_dataplane::{
    decode_append, decode_connect, decode_connected, decode_read, decode_read_answer,
};
use quarry_net::wire::{self, Decoded, Opener, DEFAULT_MAX_PAYLOAD, HEADER_LEN, TAG_LEN};
use quarry_node::{cluster, dsync};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 8 {
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
            let _ = wire::decode_error(rest);
        }
        2 if rest.len() >= 2 => {
            let method = u16::from_be_bytes([rest[0], rest[1]]);
            let _ = decode_request(method, Bytes::copy_from_slice(&rest[2..]));
        }
        3 => {
            let _ = decode_response(Bytes::copy_from_slice(rest));
        }
        4 => {
            let _ = decode_connect(rest);
            let _ = decode_connected(rest);
            let _ = decode_read(rest);
            let _ = decode_append(rest);
            let _ = decode_read_answer(rest);
        }
        5 => {
            let _ = dsync::decode_request(rest);
            let _ = dsync::decode_reply(rest);
            let _ = cluster::decode_node_info(rest);
        }
        _ => {
            let b = Bytes::copy_from_slice(rest);
            if let Ok(v) = codec::from_bytes::<Vec<Vec<String>>, _>(b.clone()) {
                assert_eq!(&codec::to_bytes(&v)[..], rest);
            }
            if let Ok(v) = codec::from_bytes::<Vec<Option<Bytes>>, _>(b) {
                assert_eq!(&codec::to_bytes(&v)[..], rest);
            }
        }
    }
});
