//! Reading an envelope text with its links taken as written (`Links::AsWritten`), against
//! reading it checked, on every vector of SPEC.md section 9: the same verdict, but for the
//! refusals of step 8 (a digest or a signature that does not hold), which it does not make.

mod common;

use common::{load, vector_files, Vector};
use hopchain_core::{read_envelope_text, Envelope, Links, Mode, Reason, Refusal};

/// The vector's envelope text: its value in body mode, else its envelope header's value.
fn envelope_text(vector: &Vector) -> &[u8] {
    if vector.topic.mode == Mode::Body {
        return &vector.value;
    }
    vector
        .headers
        .iter()
        .find(|(name, _)| name == b"hopchain-envelope")
        .map(|(_, value)| &value[..])
        .unwrap_or_default()
}

fn read(vector: &Vector, links: Links) -> Result<Envelope, Refusal> {
    let keyring = (!vector.keyring.is_empty()).then_some(&vector.keyring);
    read_envelope_text(envelope_text(vector), keyring, links)
}

/// Whether a refusal is step 8's: a schema-2 hop's digest or signature that does not hold.
fn of_the_links(refusal: &Refusal) -> bool {
    match refusal.reason {
        Reason::BadDigest => refusal.path.starts_with("$.digests["),
        Reason::BadSignature | Reason::UnsignedHop => refusal.path.starts_with("$.chain["),
        _ => false,
    }
}

#[test]
fn links_taken_as_written_change_only_the_verdicts_of_step_8() {
    let mut read_only_as_written = 0;
    let mut vectors = 0;
    for path in vector_files() {
        let vector = load(&path);
        if !envelope_text(&vector)
            .windows(11)
            .any(|w| w == b",\"chain\":[\n")
        {
            continue; // not in the layout: the record reader decides, not the text reader
        }
        vectors += 1;
        let checked = read(&vector, Links::Checked);
        let written = read(&vector, Links::AsWritten);
        match (&checked, &written) {
            (Ok(checked), Ok(written)) => {
                assert_eq!(checked.hops, written.hops, "{}", vector.name);
                assert_eq!(checked.digests, written.digests, "{}", vector.name);
                assert_eq!(checked.signatures, written.signatures, "{}", vector.name);
                assert_eq!(checked.rest, written.rest, "{}", vector.name);
            }
            (Err(refusal), Ok(_)) => {
                assert!(of_the_links(refusal), "{}: {refusal:?}", vector.name);
                read_only_as_written += 1;
            }
            (Err(checked), Err(written)) => {
                assert!(!of_the_links(checked), "{}: {checked:?}", vector.name);
                assert_eq!(checked.reason, written.reason, "{}", vector.name);
                assert_eq!(checked.path, written.path, "{}", vector.name);
            }
            (Ok(_), Err(refusal)) => {
                unreachable!(
                    "{}: read checked, refused as written: {refusal:?}",
                    vector.name
                )
            }
        }
    }
    assert!(vectors >= 40, "{vectors} vectors in the layout");
    // The vectors of an edited hop or identity, a forged or missing signature.
    assert!(read_only_as_written >= 6, "{read_only_as_written}");
}

#[test]
fn an_altered_digest_is_read_as_written() {
    let vector = vector_files()
        .iter()
        .map(|path| load(path))
        .find(|vector| vector.name == "valid-headers");
    let Some(vector) = vector else {
        unreachable!("the valid-headers vector is in tests/vectors/v2")
    };
    let text = envelope_text(&vector);
    let Ok(envelope) = read(&vector, Links::Checked) else {
        unreachable!("the valid vector is read")
    };
    assert_eq!(envelope.legacy_text, None);
    // The first digest's first hex digit, changed to another hex digit.
    let at = envelope.layout.end + "\n],\"digests\":[\"".len();
    let mut altered = text.to_vec();
    if let Some(digit) = altered.get_mut(at) {
        *digit = if *digit == b'0' { b'1' } else { b'0' };
    }
    let checked = read_envelope_text(&altered, None, Links::Checked);
    assert_eq!(
        checked
            .map(|_| ())
            .map_err(|refusal| (refusal.reason, refusal.path)),
        Err((Reason::BadDigest, "$.digests[0]".to_owned()))
    );
    let Ok(written) = read_envelope_text(&altered, None, Links::AsWritten) else {
        unreachable!("a digest of the right form is taken as written")
    };
    assert_ne!(written.digests.first(), envelope.digests.first());
    assert_eq!(written.digests.get(1..), envelope.digests.get(1..));
    // Its form is still checked: a digit that is no hex digit is refused either way.
    if let Some(digit) = altered.get_mut(at) {
        *digit = b'g';
    }
    for links in [Links::Checked, Links::AsWritten] {
        let refused = read_envelope_text(&altered, None, links).map(|_| ());
        assert_eq!(
            refused.map_err(|refusal| (refusal.reason, refusal.path)),
            Err((Reason::InvalidValue, "$.digests".to_owned()))
        );
    }
}
