//! Encoding: MessagePack with named fields by default, JSON accepted
//! everywhere (a `{` first byte or `application/json`), a size limit, and
//! version checks that name the type and both versions.

use serde::{Serialize, de::DeserializeOwned};

use crate::{MIN_SUPPORTED_VERSION, PROTOCOL_VERSION};

/// The header that names a payload's encoding.
pub const CONTENT_TYPE: &str = "Content-Type";
pub const MSGPACK: &str = "application/msgpack";
pub const JSON: &str = "application/json";
/// Default payload limit: 256 KiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 256 * 1024;

/// A top-level, versioned message.
pub trait Message: Serialize + DeserializeOwned {
    /// The type name errors use.
    const NAME: &'static str;
    fn version(&self) -> u16;
    /// Checks what the type system cannot.
    fn validate(&self) -> Result<(), crate::Invalid> {
        Ok(())
    }
    /// A faster MessagePack reader for the common shape of this message, or
    /// `None` to decode with serde (which names any error).
    fn read_msgpack(_payload: &[u8]) -> Option<Self> {
        None
    }
}

impl Message for crate::SaluteReport {
    const NAME: &'static str = "SaluteReport";
    fn version(&self) -> u16 {
        self.v
    }
    fn validate(&self) -> Result<(), crate::Invalid> {
        crate::SaluteReport::validate(self)
    }
    fn read_msgpack(payload: &[u8]) -> Option<Self> {
        crate::salute_reader::read(payload)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Msgpack,
    Json,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Msgpack => MSGPACK,
            Self::Json => JSON,
        }
    }

    /// The format of a payload: the content type if it names one, else a `{`
    /// first byte means JSON, else MessagePack.
    pub fn detect(payload: &[u8], content_type: Option<&str>) -> Self {
        Self::named(content_type).unwrap_or_else(|| {
            let first = payload.iter().find(|b| !b.is_ascii_whitespace());
            if first == Some(&b'{') {
                Self::Json
            } else {
                Self::Msgpack
            }
        })
    }

    /// The format a content type names (in any case, spaces around it
    /// ignored); `None` for none, or one XO does not read, where
    /// [`Self::detect`] goes by the payload. Read where the headers are at
    /// hand, it goes with the payload in their place.
    pub fn named(content_type: Option<&str>) -> Option<Self> {
        match content_type.map(str::trim) {
            Some(ct) if ct.eq_ignore_ascii_case(JSON) => Some(Self::Json),
            Some(ct) if ct.eq_ignore_ascii_case(MSGPACK) => Some(Self::Msgpack),
            _ => None,
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Msgpack => "msgpack",
            Self::Json => "json",
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CodecError {
    #[error("{ty}: payload of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        ty: &'static str,
        size: usize,
        limit: usize,
    },
    #[error("{ty}: unsupported schema version {found} (this build reads {min} to {max})")]
    UnsupportedVersion {
        ty: &'static str,
        found: u16,
        min: u16,
        max: u16,
    },
    #[error("{ty}: undecodable {format} payload: {reason}")]
    Undecodable {
        ty: &'static str,
        format: Format,
        reason: String,
    },
    #[error("{ty}: invalid: {reason}")]
    Invalid {
        ty: &'static str,
        reason: crate::Invalid,
    },
    #[error("{ty}: cannot encode: {reason}")]
    Encode { ty: &'static str, reason: String },
}

impl CodecError {
    /// A short machine-readable reason, carried in the dead-letter header.
    pub fn code(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::UnsupportedVersion { .. } => "unsupported_version",
            Self::Undecodable { .. } => "undecodable",
            Self::Invalid { .. } => "invalid",
            Self::Encode { .. } => "encode",
        }
    }
}

/// Encodes any serialisable value.
pub fn encode<T: Serialize>(value: &T, format: Format) -> Result<Vec<u8>, CodecError> {
    let res = match format {
        Format::Msgpack => rmp_serde::to_vec_named(value).map_err(|e| e.to_string()),
        Format::Json => serde_json::to_vec(value).map_err(|e| e.to_string()),
    };
    res.map_err(|reason| CodecError::Encode {
        ty: std::any::type_name::<T>(),
        reason,
    })
}

/// Encodes a value as MessagePack into `buf` (cleared first): a buffer
/// kept and reused does not grow again for each value.
pub fn encode_msgpack_into<T: Serialize>(value: &T, buf: &mut Vec<u8>) -> Result<(), CodecError> {
    buf.clear();
    rmp_serde::encode::write_named(buf, value).map_err(|e| CodecError::Encode {
        ty: std::any::type_name::<T>(),
        reason: e.to_string(),
    })
}

#[derive(serde::Deserialize)]
struct VersionProbe {
    #[serde(default)]
    v: Option<u16>,
}

fn decode_raw<T: DeserializeOwned>(
    ty: &'static str,
    payload: &[u8],
    format: Format,
) -> Result<T, CodecError> {
    let res = match format {
        Format::Msgpack => rmp_serde::from_slice(payload).map_err(|e| e.to_string()),
        Format::Json => serde_json::from_slice(payload).map_err(|e| e.to_string()),
    };
    res.map_err(|reason| CodecError::Undecodable { ty, format, reason })
}

/// Decodes a versioned message: size limit, version check, then the type's
/// own validation. Unknown fields are ignored.
pub fn decode<T: Message>(
    payload: &[u8],
    content_type: Option<&str>,
    limit: usize,
) -> Result<T, CodecError> {
    decode_as(payload, Format::detect(payload, content_type), limit)
}

/// [`decode`] in a format already known (read from the content type where
/// the headers were at hand, [`Format::named`], or detected).
pub fn decode_as<T: Message>(
    payload: &[u8],
    format: Format,
    limit: usize,
) -> Result<T, CodecError> {
    let ty = T::NAME;
    if payload.len() > limit {
        return Err(CodecError::TooLarge {
            ty,
            size: payload.len(),
            limit,
        });
    }
    let version_error = |found: u16| CodecError::UnsupportedVersion {
        ty,
        found,
        min: MIN_SUPPORTED_VERSION,
        max: PROTOCOL_VERSION,
    };
    let supported = |v: u16| (MIN_SUPPORTED_VERSION..=PROTOCOL_VERSION).contains(&v);
    // One pass in the common case; the version probe runs only when the
    // payload does not decode, so that a message of another major version
    // is named as such rather than as undecodable.
    let fast = match format {
        Format::Msgpack => T::read_msgpack(payload),
        Format::Json => None,
    };
    let msg: T = match fast.map_or_else(|| decode_raw(ty, payload, format), Ok) {
        Ok(m) => m,
        Err(e) => {
            if let Ok(VersionProbe { v: Some(found) }) =
                decode_raw::<VersionProbe>(ty, payload, format)
                && !supported(found)
            {
                return Err(version_error(found));
            }
            return Err(e);
        }
    };
    if !supported(msg.version()) {
        return Err(version_error(msg.version()));
    }
    msg.validate()
        .map_err(|reason| CodecError::Invalid { ty, reason })?;
    Ok(msg)
}

/// Decodes an unversioned value (control requests and replies).
pub fn decode_plain<T: DeserializeOwned>(
    payload: &[u8],
    content_type: Option<&str>,
    limit: usize,
) -> Result<T, CodecError> {
    let ty = std::any::type_name::<T>();
    if payload.len() > limit {
        return Err(CodecError::TooLarge {
            ty,
            size: payload.len(),
            limit,
        });
    }
    decode_raw(ty, payload, Format::detect(payload, content_type))
}
