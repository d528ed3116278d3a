//! Typed messages on the bus: versioned messages with a `Content-Type`
//! header and trace context, control calls, and dead letters.

use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use xo_proto::Subjects;
use xo_proto::codec::{self, CONTENT_TYPE, CodecError, Format};
use xo_proto::control::{ErrorCode, Reply, Request, ServiceError};

use crate::{Bus, BusError, Headers, Message};

pub use xo_proto::names::{DLQ_ERROR, DLQ_REASON};

/// Encodes `value`, sets `Content-Type` and trace context.
pub fn encode<T: Serialize>(value: &T, format: Format) -> Result<(Headers, Bytes), CodecError> {
    let bytes = codec::encode(value, format)?;
    let mut h = Headers::new();
    h.insert(CONTENT_TYPE, format.content_type());
    crate::trace::inject(&mut h);
    Ok((h, Bytes::from(bytes)))
}

/// Publishes an encoded value.
pub async fn publish<T: Serialize>(
    bus: &Bus,
    subject: &str,
    value: &T,
    format: Format,
) -> Result<(), BusError> {
    let (h, payload) = encode(value, format).map_err(|source| BusError::Encode {
        subject: subject.to_string(),
        source,
    })?;
    bus.publish(subject, h, payload).await
}

/// Decodes a versioned message from a bus message.
pub fn decode<T: xo_proto::Message>(msg: &Message, limit: usize) -> Result<T, CodecError> {
    codec::decode(&msg.payload, msg.headers.get(CONTENT_TYPE), limit)
}

/// Sends an undecodable message to `xo.dlq.<subject>` with the reason in headers.
pub async fn dead_letter(bus: &Bus, subjects: &Subjects, msg: &Message, err: &CodecError) {
    let mut h = msg.headers.clone();
    h.insert(DLQ_REASON, err.code());
    let mut text = err.to_string();
    text.truncate(1024);
    h.insert(DLQ_ERROR, text.replace(['\r', '\n'], " "));
    if let Err(e) = bus
        .publish(&subjects.dlq(&msg.subject), h, msg.payload.clone())
        .await
    {
        tracing::warn!(subject = %msg.subject, error = %e, "dead letter could not be published");
    }
}

/// Errors of a control call.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// Calls a control API and waits for its typed reply.
pub async fn call<R: Request>(
    bus: &Bus,
    subjects: &Subjects,
    req: &R,
    timeout: Duration,
) -> Result<R::Response, CallError>
where
    R::Response: serde::de::DeserializeOwned,
{
    call_to(bus, &req.subject_of(subjects), req, timeout).await
}

/// [`call`] on another subject than the request's usual one (one
/// instance of a service, asked by name).
pub async fn call_to<R: Request>(
    bus: &Bus,
    subject: &str,
    req: &R,
    timeout: Duration,
) -> Result<R::Response, CallError>
where
    R::Response: serde::de::DeserializeOwned,
{
    let (h, payload) = encode(req, Format::Json)?;
    let reply = bus.request(subject, h, payload, timeout).await?;
    let reply: Reply<R::Response> = codec::decode_plain(
        &reply.payload,
        reply.headers.get(CONTENT_TYPE),
        64 * 1024 * 1024,
    )?;
    Ok(reply.into_result()?)
}

/// Encodes a control reply as JSON (readable with `nats req`).
pub fn encode_reply<T: Serialize>(reply: &Reply<T>) -> (Headers, Bytes) {
    match encode(reply, Format::Json) {
        Ok(x) => x,
        Err(e) => {
            // The reply cannot be encoded: the caller is told so, in the
            // envelope it reads (a JSON value always prints).
            let why = ServiceError::new(ErrorCode::Internal, format!("reply not encodable: {e}"));
            let fallback = serde_json::json!({ "err": why });
            let mut h = Headers::new();
            h.insert(CONTENT_TYPE, codec::JSON);
            (h, Bytes::from(fallback.to_string()))
        }
    }
}

/// Every task in `state` (all: `None`) in enqueue order, fetched a page at
/// a time, so a queue of any size fits the bus's message limit.
pub async fn all_tasks(
    bus: &Bus,
    subjects: &Subjects,
    state: Option<xo_proto::queue::TaskState>,
    timeout: Duration,
) -> Result<Vec<xo_proto::queue::TaskRecord>, CallError> {
    use xo_proto::queue::ListTasks;
    let mut all = Vec::new();
    let mut req = ListTasks::of(state);
    loop {
        let page = call(bus, subjects, &req, timeout).await?;
        let Some(last) = page.last() else {
            return Ok(all);
        };
        req.after_seq = last.seq;
        all.extend(page);
    }
}

/// Every unit the supervisor knows, fetched a page at a time
/// ([`ListUnits::PAGE`](xo_proto::control::ListUnits::PAGE)), so a fleet
/// of any size fits the bus's message limit.
pub async fn all_units(
    bus: &Bus,
    subjects: &Subjects,
    timeout: Duration,
) -> Result<Vec<xo_proto::control::UnitSummary>, CallError> {
    use xo_proto::control::ListUnits;
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = call(bus, subjects, &ListUnits::page(after.take()), timeout).await?;
        let n = page.len();
        after = page.last().map(|u| u.unit.clone());
        all.extend(page);
        if n < ListUnits::PAGE {
            return Ok(all);
        }
    }
}

#[cfg(test)]
mod encode_tests {
    use super::*;

    #[test]
    fn a_reply_that_cannot_be_encoded_reaches_the_caller_as_an_internal_error() {
        let bad: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let (h, body) = encode_reply(&Reply::Ok(bad));
        let r: Reply<serde_json::Value> =
            codec::decode_plain(&body, h.get(CONTENT_TYPE), 1 << 20).unwrap();
        match r {
            Reply::Err(e) => {
                assert_eq!(e.code, ErrorCode::Internal);
                assert!(e.message.contains("reply not encodable"), "{}", e.message);
            }
            Reply::Ok(v) => panic!("an empty or partial reply went out: {v}"),
        }
    }
}
