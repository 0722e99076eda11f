//! Python bindings (feature `python`): the module `hopchain._core`.
//!
//! Batch first: one call reads a list of records and returns one verdict each, so that the
//! cost of crossing into Rust is paid once per fetch. Values are read in place (no copy);
//! a verdict builds its Python objects only when they are asked for.

use std::collections::HashMap;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::digest::{from_text, payload_digest, Hex64};
use crate::envelope::{read_envelope, read_envelope_text, Envelope, Links};
use crate::hop::Hop;
use crate::identity::Identity;
use crate::json::{parse, Member, Node, Value};
use crate::write::{
    append, append_owned, check_hop, identity_text, originate, originate_over, seal, Written,
};

use crate::read::{
    read_record, Header, Limits, Mode, Outcome, Record, Source, Topic, ENVELOPE_HEADER,
};
use crate::reason::Reason;
use crate::sign::Keyring;

/// Keys the reader checks hops with: HMAC secrets, Ed25519 public keys and signing seeds.
#[pyclass(name = "Keyring", module = "hopchain._core", frozen)]
struct PyKeyring {
    inner: Keyring,
}

#[pymethods]
impl PyKeyring {
    #[new]
    #[pyo3(signature = (hmac=None, verifying=None, signing=None))]
    fn new(
        hmac: Option<HashMap<String, Vec<u8>>>,
        verifying: Option<HashMap<String, Vec<Vec<u8>>>>,
        signing: Option<HashMap<String, Vec<u8>>>,
    ) -> PyResult<Self> {
        let mut inner = Keyring::new();
        for (component, key) in hmac.unwrap_or_default() {
            inner.add_hmac(&component, &key);
        }
        for (component, keys) in verifying.unwrap_or_default() {
            for key in keys {
                let public = <[u8; 32]>::try_from(key)
                    .map_err(|_| PyValueError::new_err("an Ed25519 public key is 32 raw bytes"))?;
                inner.add_public(&component, &public);
            }
        }
        for (component, seed) in signing.unwrap_or_default() {
            let seed = <[u8; 32]>::try_from(seed)
                .map_err(|_| PyValueError::new_err("an Ed25519 seed is 32 bytes"))?;
            inner.add_signing(&component, &seed);
        }
        Ok(PyKeyring { inner })
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

/// What the reader knows of the topic it reads.
#[pyclass(name = "Topic", module = "hopchain._core", frozen)]
struct PyTopic {
    inner: Topic,
}

#[pymethods]
impl PyTopic {
    #[new]
    #[pyo3(signature = (
        topic, mode, contract, contract_version, writers=Vec::new(), *, payload_format="json"
    ))]
    fn new(
        topic: String,
        mode: &str,
        contract: String,
        contract_version: i64,
        writers: Vec<String>,
        payload_format: &str,
    ) -> PyResult<Self> {
        // JSON is text; the schema-registry formats are framed bytes.
        let binary_payload = match payload_format {
            "json" => false,
            "avro" | "protobuf" | "json_schema" => true,
            _ => {
                return Err(PyValueError::new_err(
                    "payload_format is 'json', 'avro', 'protobuf' or 'json_schema'",
                ))
            }
        };
        let mode = match mode {
            "headers" => Mode::Headers,
            "body" => Mode::Body,
            _ => return Err(PyValueError::new_err("mode is 'headers' or 'body'")),
        };
        Ok(PyTopic {
            inner: Topic {
                topic,
                mode,
                contract,
                contract_version,
                writers,
                binary_payload,
            },
        })
    }
}

/// What a verdict keeps of a record accepted.
struct Read {
    /// The envelope as read (its last hop last): what appending a hop to it needs.
    envelope: Envelope,
    /// The text it was read from (the envelope header's value, or the body-mode value),
    /// held rather than copied, so that a hop is appended without reading it again.
    text: Option<Py<PyBytes>>,
    /// The record's value, whose payload's digest the reader computed.
    value: Option<Py<PyBytes>>,
    hops: usize,
    source: Source,
    payload: (usize, usize),
    payload_digest: String,
    traceparent: String,
    tracestate: Option<String>,
}

/// What the verdict holds, kept as Rust values until Python asks for them.
enum Held {
    Accepted(Box<Read>),
    Refused {
        reason: Reason,
        path: String,
        message: String,
        payload: Option<(usize, usize)>,
    },
    Schema1,
}

/// The reader's verdict on one record.
///
/// `kind` is `"accepted"`, `"refused"` (steps 1 to 9: the payload's contract is not
/// applied), `"refused_after_payload"` (steps 11 to 14: the payload's contract decides
/// first) or `"schema1"` (schema 1's reader decides).
#[pyclass(name = "Verdict", module = "hopchain._core", frozen)]
struct Verdict {
    held: Held,
}

#[pymethods]
impl Verdict {
    #[getter]
    fn kind(&self) -> &'static str {
        match &self.held {
            Held::Accepted(_) => "accepted",
            Held::Refused { payload: None, .. } => "refused",
            Held::Refused { .. } => "refused_after_payload",
            Held::Schema1 => "schema1",
        }
    }

    /// The reason code of a refusal.
    #[getter]
    fn code(&self) -> Option<&'static str> {
        match &self.held {
            Held::Refused { reason, .. } => Some(reason.as_str()),
            _ => None,
        }
    }

    #[getter]
    fn path(&self) -> Option<&str> {
        match &self.held {
            Held::Refused { path, .. } => Some(path),
            _ => None,
        }
    }

    #[getter]
    fn message(&self) -> Option<&str> {
        match &self.held {
            Held::Refused { message, .. } => Some(message),
            _ => None,
        }
    }

    /// The payload's bytes in the value, `(start, end)`.
    #[getter]
    fn payload(&self) -> Option<(usize, usize)> {
        match &self.held {
            Held::Accepted(read) => Some(read.payload),
            Held::Refused { payload, .. } => *payload,
            Held::Schema1 => None,
        }
    }

    /// Where the envelope was: `"value"` (body mode) or `"header"`.
    #[getter]
    fn source(&self) -> Option<&'static str> {
        match &self.held {
            Held::Accepted(read) if read.source == Source::Value => Some("value"),
            Held::Accepted(_) => Some("header"),
            _ => None,
        }
    }

    #[getter]
    fn hops(&self) -> Option<usize> {
        match &self.held {
            Held::Accepted(read) => Some(read.hops),
            _ => None,
        }
    }

    #[getter]
    fn payload_digest(&self) -> Option<&str> {
        match &self.held {
            Held::Accepted(read) => Some(&read.payload_digest),
            _ => None,
        }
    }

    #[getter]
    fn traceparent(&self) -> Option<&str> {
        match &self.held {
            Held::Accepted(read) => Some(&read.traceparent),
            _ => None,
        }
    }

    #[getter]
    fn tracestate(&self) -> Option<&str> {
        match &self.held {
            Held::Accepted(read) => read.tracestate.as_deref(),
            _ => None,
        }
    }

    /// The identity's members (`legacy` left out: it is `null` in what the core accepts).
    #[getter]
    fn identity<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Held::Accepted(read) = &self.held else {
            return Ok(None);
        };
        identity_members(py, &read.envelope.identity).map(Some)
    }

    /// What the reader keeps of the last hop.
    #[getter]
    fn last_hop<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(last) = (match &self.held {
            Held::Accepted(read) => read.envelope.last(),
            _ => None,
        }) else {
            return Ok(None);
        };
        hop_summary(py, last).map(Some)
    }

    fn __repr__(&self) -> String {
        match &self.held {
            Held::Refused { reason, path, .. } => {
                format!("Verdict({}, {reason}, {path})", self.kind())
            }
            _ => format!("Verdict({})", self.kind()),
        }
    }
}

/// The identity's members (`legacy` left out: the caller has it as text, if any).
fn identity_members<'py>(py: Python<'py>, identity: &Identity) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("contract", &identity.contract)?;
    dict.set_item("contract_version", identity.contract_version)?;
    dict.set_item("id", &identity.id)?;
    dict.set_item("intent_key", &identity.intent_key)?;
    dict.set_item("origin_span_id", &identity.origin_span_id)?;
    dict.set_item("run_id", &identity.run_id)?;
    dict.set_item("schema_version", &identity.schema_version)?;
    dict.set_item("trace_id", &identity.trace_id)?;
    dict.set_item("work_item_id", &identity.work_item_id)?;
    Ok(dict)
}

/// What the reader keeps of a hop.
fn hop_summary<'py>(py: Python<'py>, hop: &Hop) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("component", hop.component.as_str())?;
    dict.set_item("contract", hop.contract.as_str())?;
    dict.set_item("contract_version", hop.contract_version)?;
    dict.set_item("decision", hop.decision.as_str())?;
    dict.set_item("destination", hop.destination.as_str())?;
    dict.set_item("payload_digest", hop.payload_digest.as_deref())?;
    dict.set_item("span_id", hop.span_id.as_str())?;
    dict.set_item("degraded_stage", hop.degraded_stage.as_deref())?;
    Ok(dict)
}

fn held(outcome: Outcome) -> Held {
    match outcome {
        Outcome::Accepted(accepted) => {
            let hops = accepted.envelope.hop_count();
            let accepted = *accepted;
            match accepted.envelope.last() {
                Some(_) => Held::Accepted(Box::new(Read {
                    envelope: accepted.envelope,
                    text: None,
                    value: None,
                    hops,
                    source: accepted.source,
                    payload: (accepted.payload.start, accepted.payload.end),
                    payload_digest: accepted.payload_digest,
                    traceparent: accepted.traceparent,
                    tracestate: accepted.tracestate,
                })),
                None => Held::Refused {
                    reason: Reason::InvalidValue,
                    path: "$.chain".to_owned(),
                    message: "a chain has at least one hop".to_owned(),
                    payload: None,
                },
            }
        }
        Outcome::Refused(refusal) => Held::Refused {
            reason: refusal.reason,
            path: refusal.path,
            message: refusal.message,
            payload: None,
        },
        Outcome::RefusedAfterPayload { refusal, payload } => Held::Refused {
            reason: refusal.reason,
            path: refusal.path,
            message: refusal.message,
            payload: Some((payload.start, payload.end)),
        },
        Outcome::Schema1 => Held::Schema1,
    }
}

/// A header name's bytes: its UTF-8, or, for a name a client read with `surrogateescape`
/// (not UTF-8 on the wire), the bytes it stood for.
fn name_bytes(name: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let name = name
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err("a header name is a str"))?;
    match name.to_str() {
        Ok(text) => Ok(text.as_bytes().to_vec()),
        Err(_) => {
            let raw = name.call_method1("encode", ("utf-8", "surrogateescape"))?;
            Ok(raw.cast::<PyBytes>()?.as_bytes().to_vec())
        }
    }
}

fn bytes_or_none<'py>(
    value: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if value.is_none() {
        return Ok(None);
    }
    value
        .cast::<PyBytes>()
        .map(|bytes| Some(bytes.clone()))
        .map_err(|_| PyTypeError::new_err(format!("{what} is bytes or None")))
}

/// One record's objects, held while it is read.
struct RecordObjects<'py> {
    value: Option<Bound<'py, PyBytes>>,
    headers: Vec<(Vec<u8>, Option<Bound<'py, PyBytes>>)>,
}

impl RecordObjects<'_> {
    /// The object an envelope was read from: the value, or the (single) envelope header.
    fn text(&self, source: Source) -> Option<Py<PyBytes>> {
        let text = match source {
            Source::Value => self.value.as_ref(),
            Source::EnvelopeHeader => self
                .headers
                .iter()
                .find(|(name, _)| name == ENVELOPE_HEADER.as_bytes())
                .and_then(|(_, value)| value.as_ref()),
        };
        text.map(|text| text.clone().unbind())
    }
}

fn hold<'py>(record: &Bound<'py, PyAny>) -> PyResult<RecordObjects<'py>> {
    let pair = record
        .cast::<PyTuple>()
        .map_err(|_| PyTypeError::new_err("a record is a tuple (value, headers)"))?;
    let value = bytes_or_none(&pair.get_item(0)?, "a record's value")?;
    let mut headers = Vec::new();
    for header in pair.get_item(1)?.try_iter()? {
        let header = header?;
        let header = header
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err("a header is a tuple (name, value)"))?;
        let name = name_bytes(&header.get_item(0)?)?;
        let value = bytes_or_none(&header.get_item(1)?, "a header's value")?;
        headers.push((name, value));
    }
    Ok(RecordObjects { value, headers })
}

/// Read a batch of records of one topic: `records` is a sequence of `(value, headers)`,
/// `headers` a sequence of `(name, value)` as the Kafka client gives them. One verdict each.
#[pyfunction]
#[pyo3(signature = (records, topic, keyring=None, max_hops=64, max_record_bytes=1_000_000))]
fn read_batch<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyAny>,
    topic: &Bound<'py, PyTopic>,
    keyring: Option<&Bound<'py, PyKeyring>>,
    max_hops: usize,
    max_record_bytes: usize,
) -> PyResult<Vec<Verdict>> {
    let topic = &topic.get().inner;
    let keyring = keyring.map(|keyring| &keyring.get().inner);
    let limits = Limits {
        max_hops,
        max_record_bytes,
    };
    // The Python objects are held here; the bytes they hold (immutable) are read below
    // without the GIL (a batch of more than 64 KiB), so that other threads run meanwhile.
    let held_records = records
        .try_iter()?
        .map(|record| hold(&record?))
        .collect::<PyResult<Vec<RecordObjects<'py>>>>()?;
    let views: Vec<(Option<&[u8]>, Vec<Header<'_>>)> = held_records
        .iter()
        .map(|record| {
            let headers = record
                .headers
                .iter()
                .map(|(name, value)| Header {
                    name,
                    value: value.as_ref().map(|value| value.as_bytes()),
                })
                .collect();
            (record.value.as_ref().map(|value| value.as_bytes()), headers)
        })
        .collect();
    let read_all = || -> Vec<Outcome> {
        views
            .iter()
            .map(|(value, headers)| {
                let record = Record {
                    value: *value,
                    headers,
                };
                read_record(&record, topic, keyring, &limits)
            })
            .collect()
    };
    // Releasing the GIL costs more than reading a record or two: only a large batch does.
    let size: usize = views
        .iter()
        .map(|(value, headers)| {
            value.map_or(0, <[u8]>::len)
                + headers
                    .iter()
                    .map(|header| header.value.map_or(0, <[u8]>::len))
                    .sum::<usize>()
        })
        .sum();
    let outcomes = if size > DETACHED_BATCH_BYTES {
        py.detach(read_all)
    } else {
        read_all()
    };
    Ok(outcomes
        .into_iter()
        .zip(&held_records)
        .map(|(outcome, record)| {
            let mut held = held(outcome);
            if let Held::Accepted(read) = &mut held {
                read.text = record.text(read.source);
                read.value = record.value.as_ref().map(|value| value.clone().unbind());
            }
            Verdict { held }
        })
        .collect())
}

/// A refusal raised to Python: `ValueError(code, path, message)`.
fn refused(refusal: crate::reason::Refusal) -> PyErr {
    PyValueError::new_err((refusal.reason.as_str(), refusal.path, refusal.message))
}

/// The member names of SPEC.md's objects: a hop's members are named from here, not copied.
const MEMBER_NAMES: [&str; 45] = [
    "attempts",
    "code",
    "component",
    "contract",
    "contract_version",
    "decided_at",
    "decision",
    "degradation",
    "description",
    "destination",
    "duration_ms",
    "effects",
    "error_type",
    "failure",
    "id",
    "identifier",
    "instance",
    "intent_key",
    "kind",
    "legacy",
    "locally_resolvable",
    "message",
    "number",
    "observation",
    "offset",
    "origin_span_id",
    "outcome",
    "partition",
    "path",
    "payload_digest",
    "reason",
    "received_at",
    "received_from",
    "recovery_hint",
    "run_id",
    "schema_version",
    "span_id",
    "stage",
    "started_at",
    "target",
    "topic",
    "trace_id",
    "tries",
    "validation_errors",
    "work_item_id",
];

fn member_name(name: &str) -> std::borrow::Cow<'static, str> {
    match MEMBER_NAMES.iter().find(|known| **known == name) {
        Some(known) => std::borrow::Cow::Borrowed(known),
        None => std::borrow::Cow::Owned(name.to_owned()),
    }
}

/// Python values as JSON values: dict, list or tuple, str, int, bool, float and None.
fn node(value: &Bound<'_, PyAny>, depth: usize) -> PyResult<Node<'static>> {
    if depth > crate::json::PARSER_DEPTH {
        return Err(PyValueError::new_err("nested too deeply"));
    }
    let value = if value.is_none() {
        Value::Null
    } else if let Ok(flag) = value.cast::<PyBool>() {
        Value::Bool(flag.is_true())
    } else if let Ok(number) = value.cast::<PyInt>() {
        // Beyond i128 is beyond every rule: clamped, then refused by the rules.
        Value::Int(number.extract::<i128>().unwrap_or(i128::MAX))
    } else if value.cast::<PyFloat>().is_ok() {
        Value::Float
    } else if let Ok(text) = value.cast::<PyString>() {
        Value::Str(text.to_str()?.to_owned().into())
    } else if let Ok(dict) = value.cast::<PyDict>() {
        let mut members = Vec::with_capacity(dict.len());
        for (name, item) in dict.iter() {
            let name = member_name(
                name.cast::<PyString>()
                    .map_err(|_| PyTypeError::new_err("member names are str"))?
                    .to_str()?,
            );
            members.push(Member {
                name,
                node: node(&item, depth + 1)?,
            });
        }
        Value::Object(members)
    } else if value.cast::<PyList>().is_ok() || value.cast::<PyTuple>().is_ok() {
        let mut items = Vec::new();
        for item in value.try_iter()? {
            items.push(node(&item?, depth + 1)?);
        }
        Value::Array(items)
    } else {
        return Err(PyTypeError::new_err(
            "a JSON value: dict, list, str, int, bool, float or None",
        ));
    };
    Ok(Node { value, span: 0..0 })
}

fn written<'py>(py: Python<'py>, written: &Written) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            PyBytes::new(py, &written.text).into_any(),
            PyString::new(py, &written.traceparent).into_any(),
            match &written.degraded {
                Some(degraded) => PyString::new(py, degraded).into_any(),
                None => py.None().into_bound(py),
            },
        ],
    )
}

/// Append a hop to a received envelope text (SPEC.md section 7): `hop` holds the new hop's
/// members (its `payload_digest` is set from `payload`). Returns `(text, traceparent,
/// degraded)`; in body mode the record value is `text[:-1] + b',"payload":' + payload + b'}'`.
///
/// Raises `ValueError(code, path, message)` when the text or the hop is refused.
#[pyfunction]
#[pyo3(signature = (received, hop, payload, keyring=None))]
fn append_hop<'py>(
    py: Python<'py>,
    received: &[u8],
    hop: &Bound<'py, PyAny>,
    payload: &[u8],
    keyring: Option<&Bound<'py, PyKeyring>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let keyring = keyring.map(|keyring| &keyring.get().inner);
    let envelope = read_envelope(received, keyring).map_err(refused)?;
    let hop = node(hop, 0)?;
    let result = append(received, &envelope, &hop, payload, keyring).map_err(refused)?;
    written(py, &result)
}

/// Start a chain: the identity's members (`legacy` `None`) and its first hop's.
#[pyfunction]
#[pyo3(signature = (identity, hop, payload, keyring=None))]
fn originate_chain<'py>(
    py: Python<'py>,
    identity: &Bound<'py, PyAny>,
    hop: &Bound<'py, PyAny>,
    payload: &[u8],
    keyring: Option<&Bound<'py, PyKeyring>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let keyring = keyring.map(|keyring| &keyring.get().inner);
    let identity = node(identity, 0)?;
    let hop = node(hop, 0)?;
    let result = originate(&identity, &hop, payload, keyring).map_err(refused)?;
    written(py, &result)
}

/// Check a new hop's members as a reader will check hop `index` (SPEC.md section 5, step
/// 6), so that a bad hop is refused when it is appended, not when it is written.
///
/// Raises `ValueError(code, path, message)` when the hop is refused.
#[pyfunction]
#[pyo3(name = "check_hop")]
fn check_new_hop(hop: &Bound<'_, PyAny>, index: usize) -> PyResult<()> {
    check_hop(&node(hop, 0)?, index).map_err(refused)
}

/// Seal hop `index` of a chain after the digest `previous`: returns `(text, digest,
/// signature)`. `payload_digest` replaces the hop's own member when given.
///
/// Raises `ValueError(code, path, message)` when the hop is refused, and `ValueError`
/// when `previous` or `payload_digest` is not 64 lowercase hex digits.
#[pyfunction]
#[pyo3(signature = (previous, hop, index, payload_digest=None, keyring=None))]
fn seal_hop<'py>(
    py: Python<'py>,
    previous: &str,
    hop: &Bound<'py, PyAny>,
    index: usize,
    payload_digest: Option<&str>,
    keyring: Option<&Bound<'py, PyKeyring>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let hex = |text: &str| {
        from_text(text.as_bytes())
            .ok_or_else(|| PyValueError::new_err("a digest is 64 lowercase hex digits"))
    };
    let previous = hex(previous)?;
    let digest = payload_digest.map(hex).transpose()?;
    let keyring = keyring.map(|keyring| &keyring.get().inner);
    let sealed =
        seal(&previous, node(hop, 0)?, digest.as_ref(), index, keyring).map_err(refused)?;
    PyTuple::new(
        py,
        [
            PyBytes::new(py, &sealed.text).into_any(),
            PyString::new(py, &String::from_utf8_lossy(&sealed.digest)).into_any(),
            match &sealed.signature {
                Some(signature) => PyString::new(py, signature).into_any(),
                None => py.None().into_bound(py),
            },
        ],
    )
}

/// The identity's canonical text, checked as a reader will check it; `legacy` is a
/// carried-over schema-1 envelope's canonical text, written as member `legacy`.
///
/// Raises `ValueError(code, path, message)` when the identity is refused.
#[pyfunction]
#[pyo3(name = "identity_text", signature = (identity, legacy=None))]
fn write_identity<'py>(
    py: Python<'py>,
    identity: &Bound<'py, PyAny>,
    legacy: Option<&[u8]>,
) -> PyResult<Bound<'py, PyBytes>> {
    let text = identity_text(&node(identity, 0)?, legacy).map_err(refused)?;
    Ok(PyBytes::new(py, &text))
}

/// Start a chain over an identity's canonical text (as `identity_text` writes it), its
/// `legacy` `null` or a carried-over schema-1 envelope, read and checked as a reader reads
/// it. Returns `(text, traceparent, degraded)`, the legacy chain's markers first.
///
/// Raises `ValueError(code, path, message)` when the identity or the hop is refused.
#[pyfunction]
#[pyo3(signature = (identity, hop, payload, keyring=None))]
fn originate_identity<'py>(
    py: Python<'py>,
    identity: &[u8],
    hop: &Bound<'py, PyAny>,
    payload: &[u8],
    keyring: Option<&Bound<'py, PyKeyring>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let keyring = keyring.map(|keyring| &keyring.get().inner);
    let hop = node(hop, 0)?;
    let result =
        originate_over(identity, hop, &payload_digest(payload), keyring).map_err(refused)?;
    written(py, &result)
}

/// What an accepted verdict gives the writer: the text it was read from and its envelope.
fn appendable(verdict: &Verdict) -> PyResult<(&Py<PyBytes>, &Read)> {
    match &verdict.held {
        Held::Accepted(read) => match &read.text {
            Some(text) => Ok((text, read)),
            None => Err(PyValueError::new_err(
                "this verdict holds no envelope text to append to",
            )),
        },
        _ => Err(PyValueError::new_err(format!(
            "a hop is appended to an accepted record; this verdict is {}",
            verdict.kind()
        ))),
    }
}

/// Append a hop to the record a verdict accepted, without reading its text again: the same
/// bytes as `append_hop(text, hop, payload, keyring)` on the text the verdict was read from
/// (the `hopchain-envelope` header, or the value in body mode). Returns `(text,
/// traceparent, degraded)`.
///
/// Raises `ValueError(code, path, message)` when the hop is refused, and `ValueError` for a
/// verdict that is not `"accepted"`.
#[pyfunction]
#[pyo3(signature = (verdict, hop, payload, keyring=None))]
fn append_verdict<'py>(
    py: Python<'py>,
    verdict: &Bound<'py, Verdict>,
    hop: &Bound<'py, PyAny>,
    payload: &[u8],
    keyring: Option<&Bound<'py, PyKeyring>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let keyring = keyring.map(|keyring| &keyring.get().inner);
    let (text, read) = appendable(verdict.get())?;
    let digest = known_digest(py, read, payload).unwrap_or_else(|| payload_digest(payload));
    let hop = node(hop, 0)?;
    let result = append_owned(
        text.bind(py).as_bytes(),
        &read.envelope,
        hop,
        &digest,
        keyring,
    )
    .map_err(refused)?;
    written(py, &result)
}

/// The digest the reader computed of the payload to append, when it is the payload it read
/// (the same bytes: compared, not assumed), so that it is not hashed again.
fn known_digest(py: Python<'_>, read: &Read, payload: &[u8]) -> Option<Hex64> {
    let (start, end) = read.payload;
    read.value
        .as_ref()
        .and_then(|value| value.bind(py).as_bytes().get(start..end))
        .filter(|read_payload| *read_payload == payload)
        .and_then(|_| from_text(read.payload_digest.as_bytes()))
}

/// Bytes of envelope text and payload above which a batch is written without the GIL.
const DETACHED_BATCH_BYTES: usize = 64 * 1024;

/// Why an item of a batch was not written: the writer refused its hop, or its arguments.
enum Unwritten {
    Refused(crate::reason::Refusal),
    Error(PyErr),
}

/// One item of a batch to write, as read under the GIL.
struct ToWrite<'a> {
    text: &'a [u8],
    envelope: &'a Envelope,
    hop: Node<'static>,
    /// The payload's digest, when the reader computed it; else the payload, to hash.
    digest: Option<Hex64>,
    payload: &'a [u8],
}

/// Append one hop to each accepted record of a fetch: `items` is a sequence of `(verdict,
/// hop, payload)` as `append_verdict` takes them. Returns one result per item, in order:
/// `(text, traceparent, degraded)`, or, for an item refused, the `ValueError(code, path,
/// message)` that `append_verdict` would raise (returned, not raised, so that one refused
/// item does not stop the others). A large batch is hashed and written without the GIL.
#[pyfunction]
#[pyo3(signature = (items, keyring=None))]
fn append_batch<'py>(
    py: Python<'py>,
    items: &Bound<'py, PyAny>,
    keyring: Option<&Bound<'py, PyKeyring>>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let keyring = keyring.map(|keyring| &keyring.get().inner);
    // Hold every verdict and payload object first, so that their bytes are borrowed below.
    let mut held: Vec<(Bound<'py, Verdict>, Bound<'py, PyAny>, Bound<'py, PyBytes>)> = Vec::new();
    for item in items.try_iter()? {
        let item = item?;
        let item = item
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err("an item is a tuple (verdict, hop, payload)"))?;
        let verdict = item
            .get_item(0)?
            .cast_into::<Verdict>()
            .map_err(|_| PyTypeError::new_err("an item's first member is a Verdict"))?;
        let payload = item
            .get_item(2)?
            .cast_into::<PyBytes>()
            .map_err(|_| PyTypeError::new_err("an item's payload is bytes"))?;
        held.push((verdict, item.get_item(1)?, payload));
    }
    let mut prepared: Vec<Result<ToWrite<'_>, PyErr>> = Vec::with_capacity(held.len());
    let mut size = 0;
    for (verdict, hop, payload) in &held {
        prepared.push(appendable(verdict.get()).and_then(|(text, read)| {
            let text = text.bind(py).as_bytes();
            let payload = payload.as_bytes();
            size += text.len() + payload.len();
            Ok(ToWrite {
                text,
                envelope: &read.envelope,
                hop: node(hop, 0)?,
                digest: known_digest(py, read, payload),
                payload,
            })
        }));
    }
    let write_all = |prepared: Vec<Result<ToWrite<'_>, PyErr>>| -> Vec<Result<Written, Unwritten>> {
        prepared
            .into_iter()
            .map(|item| match item {
                Ok(item) => {
                    let digest = item.digest.unwrap_or_else(|| payload_digest(item.payload));
                    append_owned(item.text, item.envelope, item.hop, &digest, keyring)
                        .map_err(Unwritten::Refused)
                }
                Err(error) => Err(Unwritten::Error(error)),
            })
            .collect()
    };
    let results = if size > DETACHED_BATCH_BYTES {
        py.detach(|| write_all(prepared))
    } else {
        write_all(prepared)
    };
    results
        .into_iter()
        .map(|result| match result {
            Ok(result) => written(py, &result).map(Bound::into_any),
            Err(Unwritten::Refused(refusal)) => {
                Ok(refused(refusal).into_value(py).into_bound(py).into_any())
            }
            Err(Unwritten::Error(error)) => Ok(error.into_value(py).into_bound(py).into_any()),
        })
        .collect()
}

/// A letter's headers, held as the Python objects' own bytes.
type HeldHeaders<'py> = Vec<(Vec<u8>, Option<Bound<'py, PyBytes>>)>;

fn held_headers<'py>(headers: &Bound<'py, PyAny>) -> PyResult<HeldHeaders<'py>> {
    let mut held = Vec::new();
    for header in headers.try_iter()? {
        let header = header?;
        let header = header
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err("a header is a tuple (name, value)"))?;
        let name = name_bytes(&header.get_item(0)?)?;
        held.push((
            name,
            bytes_or_none(&header.get_item(1)?, "a header's value")?,
        ));
    }
    Ok(held)
}

fn borrowed_headers<'h>(held: &'h HeldHeaders<'_>) -> Vec<Header<'h>> {
    held.iter()
        .map(|(name, value)| Header {
            name,
            value: value.as_ref().map(|value| value.as_bytes()),
        })
        .collect()
}

/// The dead-letter index's summary of each letter's `hopchain-dlq-*` headers, as
/// `read_dead_letter_summary` returns it, with the failure's JSON last (for the caller to
/// validate); None for a letter the Python reader must read (missing, invalid or unusual).
#[pyfunction]
fn read_dead_letter_summaries<'py>(
    py: Python<'py>,
    letters: &Bound<'py, PyAny>,
) -> PyResult<Vec<Option<Bound<'py, PyTuple>>>> {
    let codes: Vec<&str> = Reason::ALL.iter().map(|reason| reason.as_str()).collect();
    let mut summaries = Vec::new();
    for headers in letters.try_iter()? {
        let held = held_headers(&headers?)?;
        let headers = borrowed_headers(&held);
        let summary = match crate::deadletter::read_summary(&headers, &codes) {
            Ok(summary) => Some(
                (
                    summary.id,
                    summary.owner,
                    summary.source_topic,
                    summary.error_type,
                    summary.reason,
                    summary.component,
                    summary.source_timestamp_ms,
                    summary.parked_at,
                    summary.envelope,
                    summary.failure,
                )
                    .into_pyobject(py)?,
            ),
            Err(_) => None,
        };
        summaries.push(summary);
    }
    Ok(summaries)
}

/// Read a schema-2 envelope text (a `hopchain-envelope` header's value, a body-mode value, a
/// dead letter's envelope): SPEC.md section 5, steps 2 to 8, in that order. Without `check`,
/// digests and signatures are checked for their form only and taken as written, for a tool
/// that shows where a chain breaks; a legacy chain is verified either way.
///
/// Returns a dict: `identity` (its members but `legacy`), `legacy` (the schema-1 chain's
/// text, or None), `hops` (each hop's `(start, end)` in the text), `last` (what the reader
/// keeps of the last hop), `markers` (each degradation marker's stage by hop index),
/// `digests`, `signatures`, and the offsets of the layout: `start` (the chain's opening
/// comma), `end` (the line feed that ends the chain), `middle` (the digests' `]`) and
/// `close` (the signatures' `]`: what follows is the caller's to check).
///
/// Raises `ValueError(code, path, message)` when the text is refused.
#[pyfunction]
#[pyo3(signature = (text, keyring=None, check=true))]
fn read_text<'py>(
    py: Python<'py>,
    text: &[u8],
    keyring: Option<&Bound<'py, PyKeyring>>,
    check: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let keyring = keyring.map(|keyring| &keyring.get().inner);
    let links = if check {
        Links::Checked
    } else {
        Links::AsWritten
    };
    let envelope = read_envelope_text(text, keyring, links).map_err(refused)?;
    let dict = PyDict::new(py);
    dict.set_item("identity", identity_members(py, &envelope.identity)?)?;
    let legacy = envelope
        .legacy_text
        .clone()
        .and_then(|span| text.get(span))
        .map(|legacy| PyBytes::new(py, legacy));
    dict.set_item("legacy", legacy)?;
    let hops: Vec<(usize, usize)> = envelope
        .layout
        .hops
        .iter()
        .map(|range| (range.start, range.end))
        .collect();
    dict.set_item("hops", hops)?;
    let last = envelope
        .last()
        .map(|last| hop_summary(py, last))
        .transpose()?;
    dict.set_item("last", last)?;
    let markers = PyDict::new(py);
    for (index, hop) in envelope.hops.iter().enumerate() {
        if let Some(stage) = &hop.degraded_stage {
            markers.set_item(index, stage.as_str())?;
        }
    }
    dict.set_item("markers", markers)?;
    let digests: Vec<&str> = envelope
        .digests
        .iter()
        .map(|digest| std::str::from_utf8(&digest[..]).unwrap_or_default())
        .collect();
    dict.set_item("digests", digests)?;
    dict.set_item("signatures", &envelope.signatures)?;
    dict.set_item("start", envelope.layout.start)?;
    dict.set_item("end", envelope.layout.end)?;
    dict.set_item("middle", envelope.layout.middle)?;
    dict.set_item("close", envelope.layout.close)?;
    Ok(dict)
}

/// A JSON value the core parsed, as Python values (dict, list, str, int, bool, None).
fn python_value<'py>(py: Python<'py>, node: &Node<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match &node.value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Int(number) => number.into_pyobject(py)?.into_any(),
        Value::Float => return Err(PyValueError::new_err("numbers in an envelope are integers")),
        Value::Str(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(python_value(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(members) => {
            let dict = PyDict::new(py);
            for member in members {
                dict.set_item(
                    PyString::intern(py, &member.name),
                    python_value(py, &member.node)?,
                )?;
            }
            dict.into_any()
        }
    })
}

/// One sealed hop's members, as the core parses them (for a view built when asked for: the
/// hop was checked when its envelope was read).
///
/// Raises `ValueError` when the bytes are not one JSON object of integers, strings, lists
/// and objects.
#[pyfunction]
fn hop_members<'py>(py: Python<'py>, sealed: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let parsed = parse(sealed).map_err(|_| PyValueError::new_err("a hop is one JSON object"))?;
    if !matches!(parsed.root.value, Value::Object(_)) {
        return Err(PyValueError::new_err("a hop is one JSON object"));
    }
    python_value(py, &parsed.root)?
        .cast_into::<PyDict>()
        .map_err(|_| PyValueError::new_err("a hop is one JSON object"))
}

/// What the dead-letter index reads of each letter, a `(headers, value)` pair, in one call:
/// the summary (id, owner, source topic, error type, reason, component, source timestamp in
/// ms), the failure's JSON (for the caller to validate), the parking envelope's identity (id,
/// trace id, intent key, redriven hops; None when the Python reader reads it leniently from
/// the letter's own envelope or `traceparent`) and the `hopchain-redrive-count` header's
/// count. None for a letter the Python reader must read (missing, invalid or unusual headers,
/// a parking envelope it cannot vouch for, a reference).
#[pyfunction]
fn read_dead_letter_entries<'py>(
    py: Python<'py>,
    letters: &Bound<'py, PyAny>,
) -> PyResult<Vec<Option<Bound<'py, PyTuple>>>> {
    let codes: Vec<&str> = Reason::ALL.iter().map(|reason| reason.as_str()).collect();
    let mut entries = Vec::new();
    for letter in letters.try_iter()? {
        let letter = letter?;
        let letter = letter
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err("a letter is a tuple (headers, value)"))?;
        let held = held_headers(&letter.get_item(0)?)?;
        let value = bytes_or_none(&letter.get_item(1)?, "a letter's value")?;
        let headers = borrowed_headers(&held);
        let value = value.as_ref().map(|value| value.as_bytes());
        let entry = match crate::deadletter::read_entry(&headers, value, &codes) {
            Ok(entry) => {
                let summary = entry.summary;
                let identity = entry.identity.map(|identity| {
                    (
                        identity.id,
                        identity.trace_id,
                        identity.intent_key,
                        identity.redriven,
                    )
                });
                Some(
                    (
                        summary.id,
                        summary.owner,
                        summary.source_topic,
                        summary.error_type,
                        summary.reason,
                        summary.component,
                        summary.source_timestamp_ms,
                        summary.failure,
                        identity,
                        entry.redrive_count,
                    )
                        .into_pyobject(py)?,
                )
            }
            Err(_) => None,
        };
        entries.push(entry);
    }
    Ok(entries)
}

/// The compiled core of hopchain: SPEC.md's reader of schema-2 records.
#[pymodule]
#[pyo3(name = "_core")]
fn core_module(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<PyKeyring>()?;
    module.add_class::<PyTopic>()?;
    module.add_class::<Verdict>()?;
    module.add_function(wrap_pyfunction!(read_batch, module)?)?;
    module.add_function(wrap_pyfunction!(append_hop, module)?)?;
    module.add_function(wrap_pyfunction!(append_verdict, module)?)?;
    module.add_function(wrap_pyfunction!(append_batch, module)?)?;
    module.add_function(wrap_pyfunction!(originate_chain, module)?)?;
    module.add_function(wrap_pyfunction!(originate_identity, module)?)?;
    module.add_function(wrap_pyfunction!(check_new_hop, module)?)?;
    module.add_function(wrap_pyfunction!(seal_hop, module)?)?;
    module.add_function(wrap_pyfunction!(write_identity, module)?)?;
    module.add_function(wrap_pyfunction!(read_dead_letter_summaries, module)?)?;
    module.add_function(wrap_pyfunction!(read_text, module)?)?;
    module.add_function(wrap_pyfunction!(hop_members, module)?)?;
    module.add_function(wrap_pyfunction!(read_dead_letter_entries, module)?)?;
    let codes: Vec<&str> = Reason::ALL.iter().map(|reason| reason.as_str()).collect();
    module.add("REASON_CODES", PyTuple::new(module.py(), codes)?)?;
    // What a panic in a binding raises (a BaseException): named so the engine can park on it.
    let panic = module.py().get_type::<pyo3::panic::PanicException>();
    module.add("PanicException", panic)?;
    Ok(())
}
