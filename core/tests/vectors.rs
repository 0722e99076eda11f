//! Every test vector of SPEC.md section 9 gets its verdict: reason code and JSON path.

mod common;

use common::{load, vector_files, verdict};

#[test]
fn every_vector_gets_its_verdict() {
    let files = vector_files();
    assert!(files.len() >= 30, "the vectors are in tests/vectors/v2");
    let mut wrong = Vec::new();
    for path in &files {
        let vector = load(path);
        let expected = vector
            .reason
            .clone()
            .map(|reason| (reason, vector.path.clone().unwrap_or_default()));
        let got = verdict(&vector);
        if got != expected {
            wrong.push(format!(
                "{}: got {got:?}, expected {expected:?}",
                vector.name
            ));
        }
    }
    println!(
        "{} of {} vectors agree",
        files.len() - wrong.len(),
        files.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
