//! How typed messages become payload bytes and back.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A payload that cannot be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[error("codec error: {0}")]
pub struct CodecError(pub String);

/// Encodes messages of type `M` to bytes and decodes them back.
///
/// A message that fails to decode can never succeed: the worker dead-letters it at once
/// (`Outcome::Reject`) instead of retrying it forever.
pub trait Codec<M>: Send + Sync + 'static {
    /// The bytes for `message`.
    fn encode(&self, message: &M) -> Result<Vec<u8>, CodecError>;
    /// The message in `bytes`.
    fn decode(&self, bytes: &[u8]) -> Result<M, CodecError>;
}

/// serde JSON: the default codec.
#[derive(Debug)]
pub struct Json<M>(PhantomData<fn() -> M>);

impl<M> Default for Json<M> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<M: Serialize + DeserializeOwned + 'static> Codec<M> for Json<M> {
    fn encode(&self, message: &M) -> Result<Vec<u8>, CodecError> {
        serde_json::to_vec(message).map_err(|e| CodecError(e.to_string()))
    }

    fn decode(&self, bytes: &[u8]) -> Result<M, CodecError> {
        serde_json::from_slice(bytes).map_err(|e| CodecError(e.to_string()))
    }
}

/// Raw bytes: the payload is the message.
#[derive(Debug, Default, Clone, Copy)]
pub struct Raw;

impl Codec<Vec<u8>> for Raw {
    fn encode(&self, message: &Vec<u8>) -> Result<Vec<u8>, CodecError> {
        Ok(message.clone())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Vec<u8>, CodecError> {
        Ok(bytes.to_vec())
    }
}
