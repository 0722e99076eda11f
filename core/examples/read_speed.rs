//! How long the reader takes over one record, read again and again:
//!
//!     cargo run --release --example read_speed -- record.json [topic] [mode] [rounds] [contract]
//!
//! `record.json` holds `{"value": "...", "headers": [["name", "value"], ...]}`; the topic's
//! contract is `contract` at version 1 (`claims` unless given). `bench.core_cycle --write DIR`
//! writes the records of its hop cycle (1, 10 and 30 hops, topic `bench.documents`, contract
//! `documents`). Under `valgrind --tool=callgrind --toggle-collect='*read_record*'` the
//! instructions counted are the reader's alone.

use std::time::Instant;

use hopchain_core::{read_record, Header, Limits, Mode, Outcome, Record, Topic};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_default();
    let topic = args.next().unwrap_or_else(|| "claims".to_owned());
    let mode = if args.next().as_deref() == Some("body") {
        Mode::Body
    } else {
        Mode::Headers
    };
    let rounds: u32 = args.next().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let contract = args.next().unwrap_or_else(|| "claims".to_owned());
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let record: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let value = record
        .get("value")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .as_bytes()
        .to_vec();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = record
        .get("headers")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|pair| {
            let name = pair.get(0)?.as_str()?.as_bytes().to_vec();
            let value = pair.get(1)?.as_str()?.as_bytes().to_vec();
            Some((name, value))
        })
        .collect();
    let headers: Vec<Header<'_>> = pairs
        .iter()
        .map(|(name, value)| Header {
            name,
            value: Some(value),
        })
        .collect();
    let record = Record {
        value: Some(&value),
        headers: &headers,
    };
    let topic = Topic {
        topic,
        mode,
        contract,
        contract_version: 1,
        writers: Vec::new(),
        binary_payload: false,
    };
    let limits = Limits::default();
    let mut accepted = 0;
    let start = Instant::now();
    for _ in 0..rounds {
        if let Outcome::Accepted(_) = read_record(&record, &topic, None, &limits) {
            accepted += 1;
        }
    }
    let each = start.elapsed() / rounds;
    println!("{accepted} of {rounds} accepted; {each:?} a record");
}
